package testworkload

import (
	"time"

	"golang.org/x/sys/unix"
)

// MonotonicToUnix returns what to add to a CLOCK_MONOTONIC time (ns), as
// the workloads print them, to get Unix time (ns): CLOCK_REALTIME −
// CLOCK_MONOTONIC, read here and now, independently of the receivers'
// own conversion (internal/ktime), so a test can check the receivers'
// timestamps against the workload's clock. Of several reads, the one
// whose two clock reads were closest is kept; the error is below a
// microsecond on an idle CPU.
func MonotonicToUnix() int64 {
	best, bestGap := int64(0), int64(-1)
	for range 16 {
		var m0, r, m1 unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &m0)
		_ = unix.ClockGettime(unix.CLOCK_REALTIME, &r)
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &m1)
		gap := m1.Nano() - m0.Nano()
		if bestGap < 0 || gap < bestGap {
			best, bestGap = r.Nano()-(m0.Nano()+gap/2), gap
		}
	}
	return best
}

// MonotonicNow returns CLOCK_MONOTONIC now, the workloads' clock.
func MonotonicNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
