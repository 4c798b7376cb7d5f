// Package ktime converts bpf_ktime_get_ns readings (CLOCK_MONOTONIC) into
// Unix time, for every BPF record that carries a timestamp.
package ktime

import (
	"sync/atomic"
	"time"
)

// samples is how many (monotonic, real, monotonic) triples one Refresh
// reads; the tightest one wins.
const samples = 5

// Clock converts CLOCK_MONOTONIC nanoseconds into Unix nanoseconds with an
// offset measured against CLOCK_REALTIME. NTP slews the real clock and
// steps it, so the owner calls Refresh periodically. The zero Clock
// converts with a zero offset until its first Refresh. A Clock is safe for
// concurrent use: one goroutine may Refresh while others convert.
type Clock struct {
	offset atomic.Int64 // realtime - monotonic, ns
	// uncertainty is half the tightest read window of the last refresh: the
	// offset is known to within it.
	uncertainty atomic.Int64
	// maxStep is the largest change between consecutive refreshes: how far
	// a record converted just before a refresh could be off.
	maxStep   atomic.Int64
	refreshed atomic.Bool
}

// New returns a Clock measured once.
func New() *Clock {
	c := &Clock{}
	c.Refresh()
	return c
}

// Refresh measures the offset again: of a few reads of the real clock, each
// between two reads of the monotonic one, the one with the shortest window
// sets it.
func (c *Clock) Refresh() {
	best, off := int64(1<<62), int64(0)
	for range samples {
		m1 := MonotonicNanos()
		r := time.Now().UnixNano()
		m2 := MonotonicNanos()
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

// UnixNanos converts a CLOCK_MONOTONIC reading in nanoseconds.
func (c *Clock) UnixNanos(ktime uint64) int64 { return int64(ktime) + c.offset.Load() }

// Uncertainty is how far off the offset of the last Refresh may be: half
// the tightest read window it saw.
func (c *Clock) Uncertainty() time.Duration { return time.Duration(c.uncertainty.Load()) }

// MaxStep is the largest change of the offset between two consecutive
// refreshes: how far a conversion made just before a refresh could be off.
func (c *Clock) MaxStep() time.Duration { return time.Duration(c.maxStep.Load()) }
