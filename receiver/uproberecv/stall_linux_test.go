package uproberecv

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Figures README.md's "Attach latency" table gives for the default config
// (quiet 2-vCPU VM), and the lookup CPU its probe list gives for node's
// constructor by demangled signature. Tests hold the receiver to
// loadMargin times them: more is a failure unless the run measured a stall
// that covers the excess.
const (
	readmeExecAttachP99   = 21100 * time.Microsecond
	readmeDlopenAttachP99 = 24700 * time.Microsecond
	readmeNodeLookupCPU   = 190 * time.Millisecond
	loadMargin            = 3
)

// stallMeter measures how long this process's threads, where the
// receiver's goroutines run, waited on a run queue over a window: the
// cause README.md gives for attach latencies beyond its figures on a
// loaded host.
type stallMeter struct {
	start map[string]int64
}

func startStall(t testing.TB) *stallMeter {
	t.Helper()
	return &stallMeter{start: threadRunDelays(t)}
}

// stalled returns the run-queue wait of this process's threads since
// startStall, summed over the threads.
func (m *stallMeter) stalled(t testing.TB) time.Duration {
	t.Helper()
	var sum int64
	for tid, d := range threadRunDelays(t) {
		sum += d - m.start[tid]
	}
	return time.Duration(sum)
}

// threadRunDelays reads each thread's run-queue wait (ns) from
// /proc/self/task/TID/schedstat.
func threadRunDelays(t testing.TB) map[string]int64 {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatalf("listing this process's threads: %v", err)
	}
	out := make(map[string]int64, len(tasks))
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/schedstat")
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			t.Fatalf("schedstat of thread %s: %q", task.Name(), b)
		}
		d, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatalf("schedstat of thread %s: %q", task.Name(), b)
		}
		out[task.Name()] = d
	}
	return out
}

// checkLatency fails t when got exceeds loadMargin times the README's
// figure by more than the stall measured meanwhile, and logs an excess the
// stall covers.
func checkLatency(t testing.TB, what string, got, readme, stall time.Duration) {
	t.Helper()
	bound := loadMargin * readme
	switch {
	case got <= bound:
	case got-bound <= stall:
		t.Logf("%s %s, over %d × the README's %s, but this process's threads waited %s on run queues meanwhile", what, got, loadMargin, readme, stall)
	default:
		t.Errorf("%s %s, over %d × the README's %s by %s, more than the %s this process's threads waited on run queues meanwhile",
			what, got, loadMargin, readme, got-bound, stall)
	}
}
