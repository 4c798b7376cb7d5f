package ktime

import (
	"testing"
	"time"
)

// TestClockError measures the conversion against fresh readings of both
// clocks: the error must stay within the read window the refresh reported,
// plus the time between the two reads here.
func TestClockError(t *testing.T) {
	c := New()
	var worst time.Duration
	for range 1000 {
		m1 := MonotonicNanos()
		real := time.Now().UnixNano()
		m2 := MonotonicNanos()
		window := time.Duration(m2-m1) / 2
		err := time.Duration(c.UnixNanos(uint64(m1+(m2-m1)/2)) - real)
		err = max(err, -err)
		if err > c.Uncertainty()+window+time.Microsecond {
			t.Fatalf("conversion off by %s; uncertainty %s, window %s", err, c.Uncertainty(), window)
		}
		worst = max(worst, err)
	}
	c.Refresh()
	t.Logf("offset uncertainty %s, worst measured error %s, step between refreshes %s",
		c.Uncertainty(), worst, c.MaxStep())
}

// TestMaxStep checks that a Refresh after a different offset reports the
// change as the largest step, and that the first Refresh reports none.
func TestMaxStep(t *testing.T) {
	var c Clock
	c.Refresh()
	if c.MaxStep() != 0 {
		t.Fatalf("first refresh reported a step of %s", c.MaxStep())
	}
	const shift = int64(time.Second)
	c.offset.Add(shift) // as if the real clock had been stepped back by 1s
	c.Refresh()
	if got := c.MaxStep(); got < time.Duration(shift)-time.Millisecond || got > time.Duration(shift)+time.Millisecond {
		t.Fatalf("step of 1s reported as %s", got)
	}
}

// TestZeroClock checks that a Clock never refreshed converts with no offset.
func TestZeroClock(t *testing.T) {
	var c Clock
	if got := c.UnixNanos(12345); got != 12345 {
		t.Fatalf("zero clock converted 12345 to %d", got)
	}
}
