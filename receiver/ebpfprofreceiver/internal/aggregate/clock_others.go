//go:build !linux

package aggregate

// monotonicClock is only meaningful on linux, where samples come from.
type monotonicClock struct{}

func (c *monotonicClock) refresh() {}

func (c *monotonicClock) unixNanos(ktime uint64) uint64 { return ktime }
