package ebpfprofreceiver

import (
	"math"
	"runtime/debug"
	"testing"
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
