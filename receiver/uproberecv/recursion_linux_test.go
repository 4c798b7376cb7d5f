package uproberecv

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestRecursionDeeperThanReturnProbes probes a recursive C function with
// exit: return and calls it 3 to 300 levels deep, one outermost call after
// another on one thread. The kernel keeps at most 64 return probes
// pending per thread and drops the deeper ones while their entries still
// fire: each outermost call must still close its scope, with one record
// lying inside the call by the workload's own clock and counting every
// inner call, and the calls after a deep one get their own records (the
// scope did not stay open for the thread). A second probe on the leaf the
// innermost call makes is timed when fewer than 64 returns are pending
// then, and otherwise not timed and counted: its scope would never close.
func TestRecursionDeeperThanReturnProbes(t *testing.T) {
	bin := testworkload.BuildC(t, "deeprec.c", "-O2", "-g")
	depths := []int{3, 63, 64, 65, 100, 300, 2, 70, 1}
	cfg := &Config{Probes: []ProbeConfig{
		{ID: "rec", Binary: bin, Entry: "rec", Exit: "return"},
		{ID: "leaf", Binary: bin, Entry: "leaf", Exit: "return"},
	}}
	r, sink := startReceiver(t, cfg, options{})
	args := make([]string, len(depths))
	for i, d := range depths {
		args[i] = strconv.Itoa(d)
	}
	cmd := exec.Command(bin, args...)
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	out := string(outb)
	type call struct{ depth, start, end int64 }
	var calls []call
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var c call
		if _, err := fmt.Sscanf(line, "call %d %d %d", &c.depth, &c.start, &c.end); err != nil {
			t.Fatalf("workload printed %q: %v", line, err)
		}
		calls = append(calls, c)
	}
	if len(calls) != len(depths) {
		t.Fatalf("workload made %d calls, want %d:\n%s", len(calls), len(depths), out)
	}
	pid := int64(cmd.Process.Pid)
	var recs []scopeLog
	waitFor(5*time.Second, func() bool {
		recs = recordsByPID(flatten(sink), "rec")[pid]
		return len(recs) >= len(calls)
	})
	c, _ := r.probes.Counters()
	t.Logf("%d records for %d outermost calls; counters %+v", len(recs), len(calls), c)
	if len(recs) != len(calls) {
		t.Fatalf("%d records for %d outermost calls of depths %v", len(recs), len(calls), depths)
	}
	offset := testworkload.MonotonicToUnix()
	const slack = int64(100 * time.Microsecond) // the clocks' conversions
	for i, l := range recs {
		c := calls[i]
		start, end := l.startUnix-offset, l.endUnix-offset
		if start < c.start-slack || end > c.end+slack {
			t.Errorf("call %d (depth %d, %d..%d): its record (%d..%d) lies outside it", i, c.depth, c.start, c.end, start, end)
		}
		if l.nested != c.depth {
			t.Errorf("call %d (depth %d): record counts %d nested calls", i, c.depth, l.nested)
		}
	}
	// leaf enters with one pending return per rec call, up to 64.
	var timed []call
	unprobed := 0
	for _, c := range calls {
		if c.depth+1 < maxPendingReturns {
			timed = append(timed, c)
		} else {
			unprobed++
		}
	}
	leaves := recordsByPID(flatten(sink), "leaf")[pid]
	if len(leaves) != len(timed) || c.ReturnUnprobed != uint64(unprobed) {
		t.Fatalf("leaf: %d records and %d entries counted as not timed, want %d and %d", len(leaves), c.ReturnUnprobed, len(timed), unprobed)
	}
	for i, l := range leaves {
		if start := l.startUnix - offset; start < timed[i].start-slack || start > timed[i].end+slack {
			t.Errorf("leaf record %d starts at %d, outside the call of depth %d (%d..%d)", i, start, timed[i].depth, timed[i].start, timed[i].end)
		}
	}
}

// maxPendingReturns is the kernel's MAX_URETPROBE_DEPTH.
const maxPendingReturns = 64
