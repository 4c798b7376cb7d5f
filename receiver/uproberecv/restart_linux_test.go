package uproberecv

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// restartCall is one call of restartcalls, by its own clock.
type restartCall struct {
	tid        int64
	start, end int64 // CLOCK_MONOTONIC ns
}

// startRestartCalls runs restartcalls with calls of ms milliseconds, and
// returns it with its files and the address of its probed function.
func startRestartCalls(t *testing.T, bin string, ms int) (pid int, start, stop, out string, fn uint64) {
	t.Helper()
	dir := t.TempDir()
	start, stop, out = dir+"/start", dir+"/stop", dir+"/out"
	addr := dir + "/addr"
	cmd := testworkload.Start(t, bin, start, stop, out, addr, strconv.Itoa(ms))
	if !waitFor(10*time.Second, func() bool {
		b, err := os.ReadFile(addr)
		if err != nil {
			return false
		}
		_, err = fmt.Sscanf(string(b), "fn %v", &fn)
		return err == nil
	}) {
		t.Fatal("restartcalls wrote no function address")
	}
	return cmd.Process.Pid, start, stop, out, fn
}

// readRestartCalls waits for restartcalls' calls.
func readRestartCalls(t *testing.T, out string) []restartCall {
	t.Helper()
	var calls []restartCall
	for _, line := range readOutput(t, out, 30*time.Second) {
		f := fields(t, line, 3)
		calls = append(calls, restartCall{tid: f[0], start: f[1], end: f[2]})
	}
	return calls
}

// firstByte reads the byte at addr in pid's memory: 0xcc is a uprobe's
// breakpoint.
func firstByte(t *testing.T, pid int, addr uint64) byte {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], int64(addr)); err != nil {
		t.Fatalf("reading pid %d at %#x: %v", pid, addr, err)
	}
	return b[0]
}

// TestReceiverRestartedMidCall probes a function two threads keep calling
// back to back (20 ms inside each call), and stops and starts the
// receiver twice while calls are under way. The workload runs on and
// exits cleanly; each receiver records exactly the calls made entirely
// while it ran, each inside its call by the workload's clock, and at most
// the calls under way when it started or stopped: a call under way at
// attach is at most an exit without entry (one per thread), never a scope
// left open, which would swallow that thread's later calls. Each shutdown
// leaves no BPF link of its programs, no descriptor, and no breakpoint in
// the workload's code.
func TestReceiverRestartedMidCall(t *testing.T) {
	bin := testworkload.BuildC(t, "restartcalls.c", "-O2", "-g", "-pthread")
	cfg := &Config{Probes: []ProbeConfig{{ID: "call", Binary: bin, Entry: "scoped", Exit: "return"}}}
	pid, start, stop, out, fn := startRestartCalls(t, bin, 20)
	fds := openFDs(t) // the workload's output pipes included
	touch(t, start)

	// Monotonic times: Start called and returned, Shutdown called and
	// returned.
	type run struct {
		starting, on, off, stopped int64
		sink                       []scopeLog
		exitsWithoutEntry          uint64
	}
	var runs []run
	for i := range 3 {
		starting := int64(testworkload.MonotonicNow())
		r, sink := startReceiver(t, cfg, options{})
		on := int64(testworkload.MonotonicNow())
		progs, err := r.probes.ProgramIDs()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
		off := int64(testworkload.MonotonicNow())
		c, _ := r.probes.Counters()
		if err := r.Shutdown(context.Background()); err != nil {
			t.Fatalf("shutdown %d: %v", i, err)
		}
		stopped := int64(testworkload.MonotonicNow())
		if n := linksOf(t, progs); n != 0 {
			t.Errorf("receiver %d: %d BPF links of its programs remain after shutdown", i, n)
		}
		if b := firstByte(t, pid, fn); b == 0xcc {
			t.Errorf("receiver %d: a breakpoint remains at the probed function after shutdown", i)
		}
		runs = append(runs, run{starting: starting, on: on, off: off, stopped: stopped,
			sink: recordsByPID(flatten(sink), "call")[int64(pid)], exitsWithoutEntry: c.ExitWithoutEntry})
	}
	if leaked := leakedFDs(fds, openFDs(t)); len(leaked) != 0 {
		t.Errorf("descriptors left open after the receivers: %v", leaked)
	}
	touch(t, stop)
	calls := readRestartCalls(t, out)
	offset := testworkload.MonotonicToUnix()
	const slack = int64(100 * time.Microsecond)
	for i, rn := range runs {
		matched := map[int]int{}
		for _, l := range rn.sink {
			start, end := l.startUnix-offset, l.endUnix-offset
			k := -1
			for j, c := range calls {
				if c.tid == l.tid && start >= c.start-slack && end <= c.end+slack {
					k = j
				}
			}
			if k < 0 {
				t.Errorf("receiver %d: record of thread %d (%d..%d) lies in no call", i, l.tid, start, end)
				continue
			}
			matched[k]++
		}
		inside, edge := 0, 0
		for j, c := range calls {
			switch {
			case c.start >= rn.on && c.end <= rn.off:
				inside++
				if matched[j] != 1 {
					t.Errorf("receiver %d: call %+v made while it ran has %d records", i, c, matched[j])
				}
			case c.end > rn.starting && c.start < rn.stopped:
				edge++
				if matched[j] > 1 {
					t.Errorf("receiver %d: call %+v under way at its start or stop has %d records", i, c, matched[j])
				}
			default:
				if matched[j] != 0 {
					t.Errorf("receiver %d: call %+v made while it did not run has a record", i, c)
				}
			}
		}
		t.Logf("receiver %d: %d records; %d calls made while it ran, %d under way at its start or stop; %d exits without entry", i, len(rn.sink), inside, edge, rn.exitsWithoutEntry)
		if inside < 20 {
			t.Errorf("receiver %d: only %d calls made while it ran", i, inside)
		}
		if rn.exitsWithoutEntry > 2 {
			t.Errorf("receiver %d: %d exits without entry, at most one per thread (calls under way at its start)", i, rn.exitsWithoutEntry)
		}
	}
}
