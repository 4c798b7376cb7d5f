package uproberecv

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPUNow returns the CPU time the calling OS thread used so far.
func threadCPUNow() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
