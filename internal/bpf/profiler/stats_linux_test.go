//go:build linux && (amd64 || arm64)

package profiler

import (
	"os"
	"slices"
	"testing"
)

// TestEventTargetsOfAProcess opens one event per thread of a profiled
// process, on any CPU, and one per CPU otherwise.
func TestEventTargetsOfAProcess(t *testing.T) {
	pid := os.Getpid()
	targets, err := eventTargets(Options{PID: pid}, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(targets, eventTarget{pid, -1}) {
		t.Errorf("targets %v lack the main thread %d on any CPU", targets, pid)
	}
	for _, tg := range targets {
		if tg.cpu != -1 {
			t.Errorf("target %v of a process is bound to a CPU", tg)
		}
	}
	targets, err = eventTargets(Options{}, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := []eventTarget{{-1, 0}, {-1, 1}}; !slices.Equal(targets, want) {
		t.Errorf("targets of every process %v, want %v", targets, want)
	}
}
