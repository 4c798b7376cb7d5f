package uproberecv

import (
	"sync/atomic"
	"time"
)

// clockSamples is how many (monotonic, real, monotonic) triples one refresh
// reads; the tightest one wins.
const clockSamples = 5

// ktimeClock converts bpf_ktime_get_ns (CLOCK_MONOTONIC) readings into Unix
// time with an offset measured against CLOCK_REALTIME. The offset is
// refreshed periodically because NTP slews the real clock and steps it.
type ktimeClock struct {
	offset atomic.Int64 // realtime - monotonic, ns
	// uncertainty is half the tightest read window of the last refresh: the
	// offset is known to within it.
	uncertainty atomic.Int64
	// maxStep is the largest change between consecutive refreshes: how far
	// a record converted just before a refresh could be off.
	maxStep   atomic.Int64
	refreshed atomic.Bool
}

// refresh measures the offset again.
func (c *ktimeClock) refresh() {
	best, off := int64(1<<62), int64(0)
	for range clockSamples {
		m1 := monotonicNanos()
		r := time.Now().UnixNano()
		m2 := monotonicNanos()
		if w := m2 - m1; w < best {
			best, off = w, r-(m1+w/2)
		}
	}
	if c.refreshed.Swap(true) {
		step := off - c.offset.Load()
		step = max(step, -step)
		if step > c.maxStep.Load() {
			c.maxStep.Store(step)
		}
	}
	c.offset.Store(off)
	c.uncertainty.Store(best / 2)
}

// unixNanos converts a CLOCK_MONOTONIC reading in nanoseconds.
func (c *ktimeClock) unixNanos(ktime uint64) int64 { return int64(ktime) + c.offset.Load() }
