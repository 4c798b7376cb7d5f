package uproberecv

import "golang.org/x/sys/unix"

// raiseThreadPriority sets the calling OS thread's nice value; the caller
// keeps its goroutine on the thread.
func raiseThreadPriority(nice int) error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
}
