//go:build !linux

package uproberecv

import "time"

var processStart = time.Now()

// monotonicNanos stands in for CLOCK_MONOTONIC, which only matters where
// BPF runs.
func monotonicNanos() int64 { return int64(time.Since(processStart)) }
