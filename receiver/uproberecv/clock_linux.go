package uproberecv

import "golang.org/x/sys/unix"

// monotonicNanos reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func monotonicNanos() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
