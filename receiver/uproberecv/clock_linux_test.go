package uproberecv

import (
	"testing"
	"time"
)

// TestKtimeClockError measures the ktime to Unix conversion against fresh
// readings of both clocks: the error must stay within the read window the
// refresh reported, plus the time between the two reads here.
func TestKtimeClockError(t *testing.T) {
	var c ktimeClock
	c.refresh()
	var worst time.Duration
	for range 1000 {
		m1 := monotonicNanos()
		real := time.Now().UnixNano()
		m2 := monotonicNanos()
		window := time.Duration(m2-m1) / 2
		err := time.Duration(c.unixNanos(uint64(m1+(m2-m1)/2)) - real)
		err = max(err, -err)
		if err > time.Duration(c.uncertainty.Load())+window+time.Microsecond {
			t.Fatalf("conversion off by %s; uncertainty %s, window %s", err, time.Duration(c.uncertainty.Load()), window)
		}
		worst = max(worst, err)
	}
	c.refresh()
	t.Logf("offset uncertainty %s, worst measured error %s, step between refreshes %s",
		time.Duration(c.uncertainty.Load()), worst, time.Duration(c.maxStep.Load()))
}
