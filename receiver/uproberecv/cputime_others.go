//go:build !linux

package uproberecv

import "time"

// threadCPUNow returns 0: per-thread CPU time is read on linux only.
func threadCPUNow() time.Duration { return 0 }
