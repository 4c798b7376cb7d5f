//go:build !linux

package uproberecv

import "errors"

// raiseThreadPriority fails: thread priorities are set on linux only.
func raiseThreadPriority(int) error { return errors.New("thread priority is set on linux only") }
