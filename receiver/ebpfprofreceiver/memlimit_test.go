package ebpfprofreceiver

import (
	"math"
	"runtime/debug"
	"testing"
	"time"
)

func TestMemoryLimitFollowsTheLiveHeap(t *testing.T) {
	for _, c := range []struct{ base, live, want int64 }{
		{24 << 20, 0, 24 << 20},
		{24 << 20, 4 << 20, 24 << 20},
		// Twice the live heap and the allowance above the floor: the
		// limit never collects before GOGC=100 would.
		{24 << 20, 30 << 20, 2*(30<<20) + nonHeapAllowance},
		{8 << 20, 1 << 30, 2*(1<<30) + nonHeapAllowance},
	} {
		if got := memoryLimitFor(c.base, c.live); got != c.want {
			t.Errorf("memoryLimitFor(%d, %d) = %d, want %d", c.base, c.live, got, c.want)
		}
	}
}

// TestGoMemoryLimitSetAndRestored checks that the receivers share one
// limit, that the last to stop restores the runtime's, and that an
// operator's GOMEMLIMIT or a limit set elsewhere is left alone.
func TestGoMemoryLimitSetAndRestored(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 {
		t.Fatalf("the test process has a memory limit already: %d", cur)
	}
	stop1 := startGoMemoryLimit(24 << 20)
	got := debug.SetMemoryLimit(-1)
	if got < 24<<20 || got == math.MaxInt64 {
		t.Fatalf("limit %d after start, want at least 24 MiB", got)
	}
	stop2 := startGoMemoryLimit(24 << 20)
	stop1()
	if cur := debug.SetMemoryLimit(-1); cur == math.MaxInt64 {
		t.Fatal("limit removed while a second receiver runs")
	}
	stop2()
	stop2()
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 {
		t.Fatalf("limit %d after the last stop, want none", cur)
	}

	// Off, or set by the operator: untouched.
	startGoMemoryLimit(0)()
	t.Setenv("GOMEMLIMIT", "1GiB")
	stop := startGoMemoryLimit(24 << 20)
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 {
		t.Errorf("limit %d set despite GOMEMLIMIT", cur)
	}
	stop()
	t.Setenv("GOMEMLIMIT", "")
	old := debug.SetMemoryLimit(1 << 30)
	defer debug.SetMemoryLimit(old)
	startGoMemoryLimit(24 << 20)()
	if cur := debug.SetMemoryLimit(-1); cur != 1<<30 {
		t.Errorf("limit %d, want the 1 GiB set elsewhere kept", cur)
	}
}

// TestMemoryLimitHoldsThroughDips feeds the limiter live-heap readings
// each second: the limit rises with the first higher reading, stays up
// through a dip shorter than limiterHold, and falls once the heap has
// stayed lower for limiterHold.
func TestMemoryLimitHoldsThroughDips(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	const base = 24 << 20
	l := &goMemoryLimiter{base: base}
	now := time.Unix(1_000_000, 0)
	feed := func(live int64, d time.Duration) {
		for end := now.Add(d); now.Before(end); now = now.Add(time.Second) {
			l.adjust(now, live)
		}
	}
	check := func(what string, live int64) {
		t.Helper()
		want := memoryLimitFor(base, live)
		if l.limit != want {
			t.Errorf("%s: limit %d, want %d (for a live heap of %d)", what, l.limit, want, live)
		}
		if cur := debug.SetMemoryLimit(-1); cur != l.limit {
			t.Errorf("%s: runtime limit %d, limiter says %d", what, cur, l.limit)
		}
	}

	feed(10<<20, time.Minute)
	check("steady small heap", 10<<20)
	l.adjust(now, 30<<20)
	check("heap grown", 30<<20)
	now = now.Add(time.Second)
	// Dips between collections, each shorter than the hold.
	for range 3 {
		feed(18<<20, limiterHold/2)
		check("dip within the hold", 30<<20)
		feed(30<<20, 5*time.Second)
	}
	feed(18<<20, limiterHold+time.Second)
	check("heap lower for longer than the hold", 18<<20)
	feed(40<<20, time.Second)
	check("heap grown again", 40<<20)
}

func TestLivePeak(t *testing.T) {
	var p livePeak
	t0 := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, c := range []struct {
		at         time.Duration
		live, want int64
	}{
		{0, 5, 5},
		{time.Second, 3, 5},
		{limiterHold / 2, 9, 9},
		{limiterHold/2 + time.Second, 1, 9},
		// The 9 is still within the hold.
		{limiterHold, 2, 9},
		// Past the hold of both the 5 and the 9: the lower readings since.
		{limiterHold/2 + limiterHold + limiterHold/livePeakSlots, 2, 2},
		// A gap longer than the hold forgets everything.
		{10 * limiterHold, 4, 4},
		// A clock that goes back too.
		{limiterHold, 3, 3},
	} {
		if got := p.add(at(c.at), c.live); got != c.want {
			t.Errorf("add(%v, %d) = %d, want %d", c.at, c.live, got, c.want)
		}
	}
}
