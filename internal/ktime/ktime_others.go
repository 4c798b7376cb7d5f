//go:build !linux

package ktime

import "time"

var processStart = time.Now()

// MonotonicNanos stands in for CLOCK_MONOTONIC, which only matters where
// BPF runs.
func MonotonicNanos() int64 { return int64(time.Since(processStart)) }
