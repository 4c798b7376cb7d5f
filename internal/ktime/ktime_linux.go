package ktime

import "golang.org/x/sys/unix"

// MonotonicNanos reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func MonotonicNanos() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
