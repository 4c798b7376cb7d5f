package ebpfprofreceiver

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// libcStart are the frames right under a stripped executable's _start,
// which neither bpfcol nor perf may be able to name.
var libcStart = map[string]bool{"__libc_start_main": true, "__libc_start_main_impl": true, "__libc_start_call_main": true}

// completeStack reports whether a stack's user frames (leaf first) reach
// the process root: its root-most frame is a root function, or an
// unnamed frame (a stripped _start) right above libc's start code.
func completeStack(names []string) bool {
	if len(names) == 0 {
		return false
	}
	base := func(n string) string {
		n, _, _ = strings.Cut(n, "@")
		return n
	}
	last := base(names[len(names)-1])
	if rootFunctions[last] {
		return true
	}
	unnamed := last == "" || last == "[unknown]"
	return unnamed && len(names) > 1 && libcStart[base(names[len(names)-2])]
}

// realProgram is a Debian program kept busy for the whole test.
type realProgram struct {
	name string
	cmd  *exec.Cmd
}

// startFed starts path with args, its stdin fed with compressible text
// until the test ends, its output discarded.
func startFed(t *testing.T, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	go func() {
		// Text with repeats at many distances: work for the compressors.
		var buf bytes.Buffer
		words := strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards quickly jinx big bad vexing elves")
		seed := uint64(1)
		for {
			buf.Reset()
			for buf.Len() < 1<<16 {
				seed = seed*6364136223846793005 + 1442695040888963407
				buf.WriteString(words[seed>>59%uint64(len(words))])
				buf.WriteByte(" \n"[seed>>40&1])
			}
			if _, err := in.Write(buf.Bytes()); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func startPlain(t *testing.T, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func requireProgram(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is not installed (scripts/install-deps.sh installs it): %v", path, err)
	}
}

// TestCFIRealPrograms profiles distribution programs without frame
// pointers (python3.11, xz, gzip, sqlite3; node, which keeps them but
// runs JIT code; and a program of ours whose time goes through qsort's
// callbacks) while perf records the same processes with DWARF unwinding
// over the same window. It asks bpfcol for at least 95% complete stacks
// of each and no fewer than perf, and, frame by frame, that at least 98%
// of bpfcol's caller -> callee edges of each process are in perf's stacks
// too (in the part of the stacks perf has), with the share left out of
// the comparison bounded and reported.
func TestCFIRealPrograms(t *testing.T) {
	for _, p := range []string{"/usr/bin/python3.11", "/usr/bin/xz", "/usr/bin/gzip", "/usr/bin/sqlite3", "/usr/bin/node"} {
		requireProgram(t, p)
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		t.Fatalf("perf is not installed (scripts/install-deps.sh installs it): %v", err)
	}
	qsort := testworkload.BuildC(t, "qsortcb.c", noFramePointers...)
	// fib keeps JIT code on the stacks; its edges name no function in
	// either tool and cannot be compared, so it gets a small share (fib(20)
	// gave 9.5-10.4% of the edges, at maxUncomparedEdges).
	node := startPlain(t, "/usr/bin/node", "-e", `
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
for (;;) { globalThis.sink = fib(17) + JSON.stringify(JSON.parse(JSON.stringify(
	Array.from({length: 500}, (_, i) => ({k: i, v: String(i).repeat(3)}))))).length; }
`)
	progs := []realProgram{
		{"python3.11", startPlain(t, "/usr/bin/python3.11", "-c", `
import json
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
while True:
    fib(22)
    json.loads(json.dumps([{"k": i, "v": str(i) * 3} for i in range(2000)]))
`)},
		{"xz", startFed(t, "/usr/bin/xz", "-6", "-T1", "-c")},
		{"gzip", startFed(t, "/usr/bin/gzip", "-9", "-c")},
		{"sqlite3", startPlain(t, "/usr/bin/sqlite3", ":memory:",
			"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 2000000000) "+
				"SELECT count(*), sum(x * x % 7) FROM (SELECT x FROM c ORDER BY (x * 7919) % 1000003 LIMIT 1000000000);")},
		{"node", node},
		{"qsortcb", startPlain(t, qsort)},
	}
	cmds := make([]*exec.Cmd, len(progs))
	pids := make([]string, len(progs))
	for i, p := range progs {
		cmds[i] = p.cmd
		pids[i] = strconv.Itoa(p.cmd.Process.Pid)
	}
	const d = 12 * time.Second
	perfData := filepath.Join(t.TempDir(), "perf.data")
	var perfOut bytes.Buffer
	var perfCmd *exec.Cmd
	run := profileWithCFIDuring(t, d, func() {
		// perf records the same processes over the measured interval,
		// often enough that an edge bpfcol sees perf sees too.
		perfCmd = exec.Command(perf, "record", "-q", "--call-graph", "dwarf", "-F", "499", "-o", perfData,
			"-p", strings.Join(pids, ","), "--", "sleep", strconv.Itoa(int(d/time.Second)))
		perfCmd.Stdout, perfCmd.Stderr = &perfOut, &perfOut
		if err := perfCmd.Start(); err != nil {
			t.Fatalf("starting perf: %v", err)
		}
	}, cmds...)
	if err := perfCmd.Wait(); err != nil {
		t.Fatalf("perf record: %v\n%s", err, perfOut.String())
	}
	perfStacks := perfScript(t, perf, perfData)
	index := newFuncIndex()

	for _, p := range progs {
		pid := p.cmd.Process.Pid
		ours := run.samplesOf(pid)
		var total, complete int64
		for _, s := range ours {
			total += s.Count
			if completeStack(s.UserNames()) {
				complete += s.Count
			}
		}
		var ptotal, pcomplete int64
		for _, st := range perfStacks[pid] {
			ptotal++
			if completeStack(perfNames(st)) {
				pcomplete++
			}
		}
		oursPct, theirs := pct(complete, total), pct(pcomplete, ptotal)
		a := compareEdges(index, ours, perfStacks[pid])
		t.Logf("%-10s complete stacks: bpfcol %.1f%% (%d/%d), perf --call-graph dwarf %.1f%% (%d/%d); edges in perf's stacks: %.2f%% (%d/%d compared, %.1f%% of %d not comparable); most missing: %v",
			p.name, oursPct, complete, total, theirs, pcomplete, ptotal,
			pct(a.matched, a.compared), a.matched, a.compared, 100-pct(a.compared, a.edges), a.edges, a.worstMissing(5))
		if total < 50 || ptotal < 15 {
			t.Errorf("%s: too few samples (bpfcol %d, perf %d)", p.name, total, ptotal)
			continue
		}
		if oursPct < 95 || oursPct < theirs {
			t.Errorf("%s: %.1f%% complete stacks, want >= 95%% and >= perf's %.1f%%; some incomplete: %v",
				p.name, oursPct, theirs, incompleteExamples(ours))
		}
		if pct(a.matched, a.compared) < minEdgeAgreement {
			t.Errorf("%s: %.2f%% of bpfcol's edges are in perf's stacks, want >= %.0f%%; most missing: %v",
				p.name, pct(a.matched, a.compared), minEdgeAgreement, a.worstMissing(10))
		}
		if 100-pct(a.compared, a.edges) > maxUncomparedEdges {
			t.Errorf("%s: %.1f%% of bpfcol's edges could not be compared (perf never unwound out of their callee, or a function neither tool tells), more than %.0f%%",
				p.name, 100-pct(a.compared, a.edges), maxUncomparedEdges)
		}
	}
}

// The edge check's bounds, in percent: the share of bpfcol's compared
// edges perf's stacks must hold, and the share of bpfcol's edges that may
// be left out of the comparison.
const (
	minEdgeAgreement   = 98.0
	maxUncomparedEdges = 10.0
)

func pct(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

func incompleteExamples(samples []pprofiletest.Sample) []string {
	var out []string
	for _, s := range samples {
		if names := s.UserNames(); !completeStack(names) && len(out) < 3 {
			out = append(out, "["+joinNames(names)+"]")
		}
	}
	return out
}
