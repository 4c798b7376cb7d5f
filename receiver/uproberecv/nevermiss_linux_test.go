package uproberecv

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// recordsByPID counts the received records of probe by pid.
func recordsByPID(logs []scopeLog, probe string) map[int64][]scopeLog {
	out := map[int64][]scopeLog{}
	for _, l := range logs {
		if l.probe == probe {
			out[l.pid] = append(out[l.pid], l)
		}
	}
	return out
}

// spacedRun is one run of shortcalls with its calls spaced, by its own
// clock (CLOCK_MONOTONIC ns), and the stall of this process's threads
// while it ran.
type spacedRun struct {
	pid   int64
	start int64
	at    []int64
	stall time.Duration
}

// runSpaced runs shortcalls with calls calls interval apart.
func runSpaced(t *testing.T, bin string, calls int, interval time.Duration) spacedRun {
	t.Helper()
	stall := startStall(t)
	cmd := exec.Command(bin, strconv.Itoa(calls), strconv.FormatInt(interval.Microseconds(), 10))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("spaced run: %v\n%s", err, out)
	}
	run := spacedRun{pid: int64(cmd.Process.Pid), stall: stall.stalled(t)}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var v int64
		switch {
		case strings.HasPrefix(line, "start "):
			_, err = fmt.Sscanf(line, "start %d", &run.start)
		case strings.HasPrefix(line, "call "):
			_, err = fmt.Sscanf(line, "call %d", &v)
			run.at = append(run.at, v)
		}
		if err != nil {
			t.Fatalf("spaced run printed %q: %v", line, err)
		}
	}
	if len(run.at) != calls || run.start == 0 {
		t.Fatalf("spaced run printed %d calls, start %d:\n%s", len(run.at), run.start, out)
	}
	return run
}

// check holds the run's records to its own clock: each starts inside the
// call it records, the calls recorded are all those from the first one
// recorded on, and the last call missed came no later than loadMargin ×
// the README's exec-to-attach p99 after the process started, unless a
// stall covers the excess.
func (run spacedRun) check(t *testing.T, recs []scopeLog) {
	t.Helper()
	offset := testworkload.MonotonicToUnix()
	starts := make([]int64, 0, len(recs))
	for _, l := range recs {
		starts = append(starts, l.startUnix-offset)
	}
	slices.Sort(starts)
	missed := len(run.at) - len(recs)
	if missed < 0 {
		t.Fatalf("first run: %d records for %d calls", len(recs), len(run.at))
	}
	// Call i began at at[i] and ended before at[i+1], a millisecond later:
	// the record of the call starts between them (with slack for the
	// receiver's conversion of the clock, which steps with NTP).
	const slack = int64(100 * time.Microsecond)
	for k, st := range starts {
		i := missed + k
		next := int64(math.MaxInt64 - slack)
		if i+1 < len(run.at) {
			next = run.at[i+1]
		}
		if st < run.at[i]-slack || st > next+slack {
			t.Errorf("first run: record %d of %d starts at %d, outside call %d (%d..%d): a call after the first recorded one was lost",
				k, len(recs), st, i, run.at[i], next)
			return
		}
	}
	latency := time.Duration(0)
	if missed > 0 {
		latency = time.Duration(run.at[missed-1] - run.start)
	}
	t.Logf("first run (pid %d): %d of %d calls recorded; the last one missed came %s after the process started; its threads' stall %s",
		run.pid, len(recs), len(run.at), latency, run.stall)
	checkLatency(t, "first run: the last call missed came", latency, readmeExecAttachP99, run.stall)
}

// TestShortProcessesEveryCall starts a binary that no other process maps
// 50 times after the receiver, each run making its calls at once and
// exiting: every call of every run is recorded. With binary: the file is
// attached at start; with file_match it is retained after each run, so
// only the first run may miss calls: it makes its calls a millisecond
// apart for 100 ms instead, and every call from the first recorded one on
// is recorded, the first recorded one no later than loadMargin times the
// README's exec-to-attach p99 after it started (beyond that only with a
// stall of the receiver's threads measured to cover the excess). With
// a file_match anchored on a directory, the binary is written into that
// directory after the receiver started and attached then, before it runs:
// every call of its first run is recorded too. So with a new version of a
// binary: file moved over it after start (binary_new_version).
func TestShortProcessesEveryCall(t *testing.T) {
	built := testworkload.BuildC(t, "shortcalls.c", "-O2", "-g")
	const runs, calls = 50, 20
	// The first file_match run: calls a millisecond apart for 100 ms,
	// longer than loadMargin × the README's exec-to-attach p99.
	const firstCalls, firstInterval = 100, time.Millisecond
	for _, mode := range []string{"binary", "file_match", "watched_dir", "binary_new_version"} {
		t.Run(mode, func(t *testing.T) {
			bin := built
			probe := ProbeConfig{ID: "short", Entry: "short_call", Exit: "return"}
			switch mode {
			case "binary":
				probe.Binary = bin
			case "file_match":
				// Not anchored: a regex anchored on a directory has that
				// directory's files attached at start and when written,
				// and this run is about a binary first seen when it runs.
				probe.FileMatch = regexp.QuoteMeta(bin) + "$"
			case "watched_dir":
				dir := t.TempDir()
				bin = filepath.Join(dir, "shortcalls")
				probe.FileMatch = "^" + regexp.QuoteMeta(dir) + "/[^/]+$"
			case "binary_new_version":
				bin = filepath.Join(t.TempDir(), "shortcalls")
				copyFile(t, built, bin)
				probe.Binary = bin
			}
			cfg := &Config{Probes: []ProbeConfig{probe}, Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour}}
			r, sink := startReceiver(t, cfg, options{})
			switch mode {
			case "binary_new_version":
				// Installed after start as package managers do: written
				// beside, then moved over the old version.
				next := bin + ".new"
				copyFile(t, built, next)
				if err := os.Rename(next, bin); err != nil {
					t.Fatal(err)
				}
				if !waitFor(10*time.Second, func() bool { return r.tracker.isAttached(keyOf(t, bin)) }) {
					t.Fatal("the new version of the binary was not attached")
				}
			case "watched_dir":
				// Written after start, as a deployment would: attached
				// when its writer closes it, before anything runs it.
				copyFile(t, built, bin)
				// The count follows the attach: waited on, not read right
				// after isAttached turned true.
				onWrite := func() int64 { return r.tracker.stats.attachedOnWrite.Load() }
				if !waitFor(10*time.Second, func() bool { return onWrite() > 0 }) || !r.tracker.isAttached(keyOf(t, bin)) {
					t.Fatalf("the binary written into the watched directory was not attached on write (%d attached on write)", onWrite())
				}
				if n := onWrite(); n != 1 {
					t.Fatalf("%d files attached on write, want 1", n)
				}
			}
			var pids []int64
			var first spacedRun
			key := keyOf(t, bin)
			for i := range runs {
				if i == 0 && mode == "file_match" {
					first = runSpaced(t, bin, firstCalls, firstInterval)
					pids = append(pids, first.pid)
					// The first run is allowed its attach latency: the
					// binary is attached once it was seen.
					if !waitFor(5*time.Second, func() bool { n, _ := r.tracker.attachedCount(key); return n == 1 }) {
						t.Fatal("the binary was not attached after its first run")
					}
					continue
				}
				cmd := exec.Command(bin, strconv.Itoa(calls))
				out, err := cmd.Output()
				if err != nil || strings.TrimSpace(string(out)) != fmt.Sprintf("calls %d", calls) {
					t.Fatalf("run: %q, %v", out, err)
				}
				pids = append(pids, int64(cmd.Process.Pid))
				if i == 0 && mode == "file_match" {
					// The first run is allowed its attach latency: the
					// binary is attached once it was seen.
					if !waitFor(5*time.Second, func() bool { n, _ := r.tracker.attachedCount(key); return n == 1 }) {
						t.Fatal("the binary was not attached after its first run")
					}
				}
			}
			skip := 0
			if mode == "file_match" {
				skip = 1
			}
			want := (runs - skip) * calls
			var by map[int64][]scopeLog
			waitFor(10*time.Second, func() bool {
				by = recordsByPID(flatten(sink), "short")
				got := 0
				for _, pid := range pids[skip:] {
					got += len(by[pid])
				}
				return got >= want
			})
			for i, pid := range pids {
				if i < skip {
					first.check(t, by[pid])
					continue
				}
				if len(by[pid]) != calls {
					t.Errorf("run %d (pid %d): %d records, want %d", i, pid, len(by[pid]), calls)
				}
				for _, l := range by[pid] {
					if l.exePath != bin || l.exeName != filepath.Base(bin) {
						t.Fatalf("run %d: record without its executable: %+v", i, l)
					}
				}
			}
			st := &r.tracker.stats
			evaluations := int64(1)
			if mode == "binary_new_version" {
				evaluations = 2 // the version at start, then the new one
			}
			if got := st.evaluations.Load(); got != evaluations {
				t.Errorf("binaries_evaluated %d for %d execs of one binary, want %d", got, runs, evaluations)
			}
			c, err := r.probes.Counters()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d runs: %d processes exited before attach, %d exits without entry, %d ringbuf losses",
				runs, st.exitedBeforeAttach.Load(), c.ExitWithoutEntry, c.LostRingbuf)
			// Loss is never silent: a first run with calls missed is
			// counted as a process gone before its attach.
			if skip == 1 && len(by[pids[0]]) < firstCalls && st.exitedBeforeAttach.Load() == 0 && c.ExitWithoutEntry == 0 {
				n, _, _ := r.tracker.latency.percentiles(triggerExec)
				if n == 0 {
					t.Errorf("the first run lost %d calls and no counter says so", firstCalls-len(by[pids[0]]))
				}
			}
			if mode != "file_match" && st.exitedBeforeAttach.Load() != 0 {
				t.Errorf("%d processes counted as exited before attach with the binary attached before it ran", st.exitedBeforeAttach.Load())
			}
			if n, _, _ := r.tracker.latency.percentiles(triggerExec); mode != "file_match" && n != 0 {
				t.Errorf("%d exec to attach latencies with the binary attached before it ran", n)
			}
		})
	}
}

// TestDlopenLateLibrary loads a library nothing else maps 1 s after the
// process started and calls it every millisecond: every call after the
// attach is recorded. A library on disk when the receiver starts is
// attached then, and one written after start into the directory an
// anchored file_match names is attached when written: no call may be
// missed at all (the issue allows the first 5 ms). One created after start
// where no directory is watched (an unanchored regex) is attached when its
// mapping is seen: the last call missed must come no later than
// loadMargin × the README's dlopen-to-attach p99 after dlopen began,
// unless a stall of the receiver's threads covers the excess (speed
// itself is the benchmark's to measure).
func TestDlopenLateLibrary(t *testing.T) {
	built := testworkload.BuildC(t, "dlib.c", "-O2", "-g", "-shared", "-fPIC")
	bin := testworkload.BuildC(t, "dlopener.c", "-O2", "-g")
	for _, mode := range []string{"on disk at start", "written into the watched directory", "created after start"} {
		t.Run(mode, func(t *testing.T) {
			lib := filepath.Join(t.TempDir(), "libdlib.so")
			if mode == "on disk at start" {
				copyFile(t, built, lib)
			}
			match := "^" + regexp.QuoteMeta(lib) + "$"
			if mode == "created after start" {
				match = regexp.QuoteMeta(lib) + "$"
			}
			cfg := &Config{
				Probes: []ProbeConfig{{ID: "late", FileMatch: match, Entry: "lib_call", Exit: "return"}},
				Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour},
			}
			r, sink := startReceiver(t, cfg, options{})
			t.Logf("mappings seen by %s", mappingsName(r.watcher.Mappings()))
			if mode != "on disk at start" {
				copyFile(t, built, lib)
			}
			if mode == "written into the watched directory" {
				if !waitFor(10*time.Second, func() bool { return r.tracker.isAttached(keyOf(t, lib)) }) {
					t.Fatal("the library written into the watched directory was not attached")
				}
			}
			stall := startStall(t)
			missed, latency := runDlopener(t, r, sink, bin, lib)
			if mode != "created after start" && missed != 0 {
				t.Errorf("%d calls missed of a library attached before it was loaded (%s)", missed, mode)
			}
			checkLatency(t, "the last call missed came, after dlopen began,", latency, readmeDlopenAttachP99, stall.stalled(t))
		})
	}
}

// runDlopener runs the dlopener on lib and checks that every call after
// the first recorded one is recorded; it returns the calls missed and when
// the last call missed came after dlopen began (zero for none), which the
// caller holds to the README's latency.
func runDlopener(t *testing.T, r *logsReceiver, sink *consumertest.LogsSink, bin, lib string) (missed int, latency time.Duration) {
	t.Helper()
	const calls = 500
	out := filepath.Join(t.TempDir(), "out")
	if stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err == nil {
		defer stats.Close()
	}
	cmd := testworkload.Start(t, bin, lib, "1000", strconv.Itoa(calls), out)
	lines := readOutput(t, out, 30*time.Second)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	var dlopenStart, dlopenEnd int64
	var at []int64
	var code string
	for _, line := range lines {
		f := strings.Fields(line)
		switch {
		case f[0] == "dlopen" && len(f) == 3:
			dlopenStart, _ = strconv.ParseInt(f[1], 10, 64)
			dlopenEnd, _ = strconv.ParseInt(f[2], 10, 64)
		case f[0] == "code" && len(f) == 2:
			code = f[1]
		case f[0] == "call" && len(f) == 2:
			v, _ := strconv.ParseInt(f[1], 10, 64)
			at = append(at, v)
		}
	}
	if len(at) != calls || dlopenStart == 0 {
		t.Fatalf("workload wrote %d calls, dlopen %d", len(at), dlopenStart)
	}
	pid := int64(cmd.Process.Pid)
	// What discovery did, for a run that recorded nothing: taken before
	// shutdown closes the watcher and detaches the library.
	state := discoveryState(t, r, lib) + "; programs " + programRuns(r)
	if links, err := exec.Command("bpftool", "link", "show").Output(); err == nil {
		state += "; links:\n" + string(links)
	}
	// Shutdown detaches the uprobes and hands on every record left in the
	// ringbuf: after it, every call's record is in the sink, none in flight
	// (under load a fixed wait could count before the last ones came).
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	recs := recordsByPID(flatten(sink), "late")[pid]
	if len(recs) == 0 || len(recs) > calls {
		t.Fatalf("%d records for %d calls; lib_call's code after the calls %s; %s", len(recs), calls, code, state)
	}
	// Records start inside their call: convert their Unix start back to
	// CLOCK_MONOTONIC. The first call recorded is the last one begun by
	// then: call i's timestamp is taken before it enters lib_call, call
	// i+1's after it returned. (A margin would be wrong: a call late out
	// of its sleep is followed at once by the next, microseconds apart.)
	offset := r.clock.UnixNanos(0)
	first := recs[0].startUnix
	for _, l := range recs {
		first = min(first, l.startUnix)
	}
	firstRecorded := sort.Search(len(at), func(i int) bool { return at[i] > first-offset }) - 1
	if firstRecorded < 0 {
		t.Fatalf("the first record starts at %d, before the first call at %d", first-offset, at[0])
	}
	missed = calls - len(recs)
	if missed != firstRecorded {
		t.Errorf("%d calls missed, but the first record is of call %d (it began %s after that call, %s before the next; clock offset steps up to %s): a call after the attach was lost",
			missed, firstRecorded, time.Duration(first-offset-at[firstRecorded]), time.Duration(at[min(firstRecorded+1, calls-1)]-(first-offset)), r.clock.MaxStep())
	}
	early := sort.Search(len(at), func(i int) bool { return at[i] >= dlopenStart+int64(5*time.Millisecond) })
	if missed > 0 {
		latency = time.Duration(at[missed-1] - dlopenStart)
	}
	n, p50, p99 := r.tracker.latency.percentiles(triggerMapping)
	t.Logf("dlopen took %s; %d of %d calls missed (%d made in the first 5 ms); first recorded call %s after dlopen began; mapping to attach latency p50 %s p99 %s (%d samples)",
		time.Duration(dlopenEnd-dlopenStart), missed, calls, early, time.Duration(at[min(firstRecorded, calls-1)]-dlopenStart), p50, p99, n)
	return missed, latency
}

// TestPythonImportsSqliteLate imports sqlite3 3 s after python3.11
// started and runs 100 queries: at least 98% of the sqlite3_step calls,
// counted by an LD_PRELOAD shim, are recorded.
func TestPythonImportsSqliteLate(t *testing.T) {
	python, err := exec.LookPath("python3.11")
	if err != nil {
		t.Fatalf("python3.11 is installed by scripts/install-deps.sh: %v", err)
	}
	shim := testworkload.BuildC(t, "stepcount.c", "-O2", "-shared", "-fPIC")
	cfg := &Config{
		Probes: []ProbeConfig{{ID: "step", FileMatch: `/libsqlite3\.so[.0-9]*$`, Entry: "sqlite3_step", Exit: "return"}},
		Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour},
	}
	r, sink := startReceiver(t, cfg, options{})
	dir := t.TempDir()
	counted := filepath.Join(dir, "steps")
	script := `
import time
time.sleep(3)
import sqlite3
c = sqlite3.connect(":memory:")
c.execute("create table t(x integer)")
c.executemany("insert into t values (?)", [(i,) for i in range(100)])
for i in range(100):
    c.execute("select x from t where x = ?", (i,)).fetchall()
c.close()
`
	cmd := exec.Command(python, "-c", script)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+shim, "STEPCOUNT_OUT="+counted)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python: %v: %s", err, out)
	}
	b, err := os.ReadFile(counted)
	if err != nil {
		t.Fatal(err)
	}
	var steps int
	if _, err := fmt.Sscanf(string(b), "steps %d", &steps); err != nil || steps < 200 {
		t.Fatalf("shim counted %q", b)
	}
	pid := int64(cmd.Process.Pid)
	var recs []scopeLog
	waitFor(5*time.Second, func() bool {
		recs = recordsByPID(flatten(sink), "step")[pid]
		return len(recs) >= steps
	})
	c, _ := r.probes.Counters()
	t.Logf("counters %+v; %d records of other processes", c, len(flatten(sink))-len(recs))
	n, p50, p99 := r.tracker.latency.percentiles(triggerMapping)
	t.Logf("%d of %d sqlite3_step calls recorded (%.1f%%); mapping to attach latency p50 %s p99 %s (%d samples)",
		len(recs), steps, 100*float64(len(recs))/float64(steps), p50, p99, n)
	if len(recs) > steps || float64(len(recs)) < 0.98*float64(steps) {
		t.Errorf("%d records for %d sqlite3_step calls, want at least 98%%", len(recs), steps)
	}
}

// TestGetentRecordsCarryExecutable runs getent 50 times: every record of
// getaddrinfo carries the process's executable, though each process is
// gone before its records are read.
func TestGetentRecordsCarryExecutable(t *testing.T) {
	getent, err := exec.LookPath("getent")
	if err != nil {
		t.Fatal(err)
	}
	getent, _ = filepath.EvalSymlinks(getent)
	cfg := &Config{
		Probes: []ProbeConfig{{ID: "dns", FileMatch: `/libc\.so\.6$`, Entry: "getaddrinfo", Exit: "return"}},
		Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour},
	}
	_, sink := startReceiver(t, cfg, options{})
	const runs = 50
	var pids []int64
	for range runs {
		cmd := exec.Command(getent, "ahosts", "localhost")
		if out, err := cmd.Output(); err != nil {
			t.Fatalf("getent: %v: %s", err, out)
		}
		pids = append(pids, int64(cmd.Process.Pid))
	}
	var by map[int64][]scopeLog
	waitFor(5*time.Second, func() bool {
		by = recordsByPID(flatten(sink), "dns")
		for _, pid := range pids {
			if len(by[pid]) == 0 {
				return false
			}
		}
		return true
	})
	withExe := 0
	for i, pid := range pids {
		if len(by[pid]) == 0 {
			t.Errorf("run %d (pid %d): no getaddrinfo record", i, pid)
			continue
		}
		ok := true
		for _, l := range by[pid] {
			if l.exePath != getent || l.exeName != filepath.Base(getent) {
				t.Errorf("run %d: record with executable %q %q, want %s", i, l.exePath, l.exeName, getent)
				ok = false
			}
		}
		if ok {
			withExe++
		}
	}
	t.Logf("%d of %d getent runs' records carry %s", withExe, runs, getent)
}

// nodeBlocks runs twenty 200 ms and twenty 20 ms blocks of busy JavaScript,
// each in its own timer callback, and prints for each block its length in
// ms, its start (CLOCK_MONOTONIC ns) and the main thread's run-queue wait
// (schedstat) from that start to the next callback: the stall a loaded
// machine adds to the scope, which is not the probe's error. It prints the
// same wait for the two other scopes it runs in, the main script's (with
// its end) and the last callback's.
const nodeBlocks = `
const fs = require("fs");
function runDelay() {
  return BigInt(fs.readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[1]);
}
// A 20 ms block first: the first callback of a process runs node's timer
// code for the first time, inside its scope but before the callback's
// first line (the scope began 4.0-4.6 ms before the block in three runs);
// a 20 ms scope is recorded only when stalled past min_duration, so no
// timed block pays that.
const blocks = [20];
for (let i = 0; i < 20; i++) blocks.push(200, 20);
// A block waits without allocating: a loop reading process.hrtime.bigint()
// allocated hundreds of MB per block, and the garbage collection that
// followed, inside the scope but after the block, added 2-4 ms to it.
const cell = new Int32Array(new SharedArrayBuffer(4));
function busy(ms) {
  Atomics.wait(cell, 0, 0, ms);
}
const done = [];
let i = 0, prev = null;
const startDelay = runDelay();
// A block's callback is timed from its first line to its last, by the
// script's clock: the wait overshoots its time by up to 2 ms, and reading
// schedstat takes a while.
function next() {
  const t0 = process.hrtime.bigint();
  const delay = runDelay();
  // The wait before the first block, as the others get from the block
  // before them.
  if (!prev) done.push("first " + (delay - startDelay));
  if (prev) done.push("block " + prev.ms + " " + prev.t0 + " " + prev.t1 + " " + (delay - prev.delay));
  if (i >= blocks.length) {
    console.log(done.join("\n"));
    // This last callback is a scope too: its wait since delay was read.
    console.log("last " + (runDelay() - delay));
    return;
  }
  const ms = blocks[i++];
  busy(ms);
  setTimeout(next, 30);
  prev = { ms: ms, t0: t0, delay: delay, t1: process.hrtime.bigint() };
}
setTimeout(next, 300);
// So is the main script: the thread's whole run-queue wait so far bounds
// the wait inside it.
done.push("main " + process.hrtime.bigint() + " " + runDelay());
`

// otherScope is a record of a scope of the node script that is not a
// block, and the run-queue wait measured around that scope.
type otherScope struct {
	what string
	rec  scopeLog
	wait int64
}

// nodeBlock is one block the node script ran, by its own clock.
type nodeBlock struct {
	ms                int64
	start, end, stall int64 // CLOCK_MONOTONIC ns; run-queue wait ns
	// before is the run-queue wait the script measured up to this block's
	// start since the previous one's: the scope opens before the callback
	// runs, so part of it may fall inside the scope.
	before int64
}

// TestNodeCallbackScopeByDemangledName probes node's InternalCallbackScope
// from constructor to destructor, both named by demangled signature, with
// min_duration 50ms: exactly the twenty 200 ms blocks are recorded, each
// as long as the block by the script's own clock ± 2 ms, beyond the
// run-queue wait the script itself measured (zero on an idle machine); a
// 20 ms block is recorded only when that wait made
// its scope reach 50 ms. The wait counted is the script's own measure
// around the block (schedstat), an upper bound of the stall inside the
// scope. The same holds for the script's two other scopes, the main script
// and its last callback: each is recorded at most once, and only when
// without the wait measured around it it stays under 50 ms. The lookup's CPU is reported (the goal is
// 200 ms) and a second node process costs no lookup at all.
func TestNodeCallbackScopeByDemangledName(t *testing.T) {
	const node = "/usr/bin/node"
	if _, err := os.Stat(node); err != nil {
		t.Fatalf("node is installed on these machines: %v", err)
	}
	cfg := &Config{Probes: []ProbeConfig{{
		ID:             "callback",
		Binary:         node,
		Entry:          "node::InternalCallbackScope::InternalCallbackScope(node::Environment*, v8::Local<v8::Object>, node::async_context const&, int)",
		Exit:           "node::InternalCallbackScope::~InternalCallbackScope()",
		MainThreadOnly: true,
		MinDuration:    50 * time.Millisecond,
	}}}
	r, sink := startReceiver(t, cfg, options{})
	st := &r.tracker.stats
	lookupCPU, evaluations := time.Duration(st.lookupCPUNanos.Load()), st.evaluations.Load()
	t.Logf("node's lookup at start: %s CPU, %d evaluation", lookupCPU, evaluations)
	if evaluations != 1 || lookupCPU <= 0 {
		t.Fatalf("%d evaluations, %s lookup CPU: node not planned at start", evaluations, lookupCPU)
	}
	// The lookup is a table scan, not a demangling of 140k names
	// (seconds). CPU time, not wall time: a busy host adds little to it.
	if lookupCPU > loadMargin*readmeNodeLookupCPU {
		t.Errorf("lookup CPU %s, over %d × the README's %s", lookupCPU, loadMargin, readmeNodeLookupCPU)
	}
	offset := r.clock.UnixNanos(0)
	for run := range 2 {
		// V8 compiles hot functions as it goes, at a call or a return
		// inside a scope but outside its block: 2-4 ms after blocks 7 and
		// 11 of both runs in CI. The script's few lines run interpreted.
		cmd := exec.Command(node, "--no-opt", "--no-sparkplug", "-e", nodeBlocks)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v", err)
		}
		var blocks []nodeBlock
		var firstWait, mainEnd, mainWait, lastWait int64
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var err error
			switch {
			case strings.HasPrefix(line, "first "):
				_, err = fmt.Sscanf(line, "first %d", &firstWait)
			case strings.HasPrefix(line, "main "):
				_, err = fmt.Sscanf(line, "main %d %d", &mainEnd, &mainWait)
			case strings.HasPrefix(line, "last "):
				_, err = fmt.Sscanf(line, "last %d", &lastWait)
			default:
				var b nodeBlock
				_, err = fmt.Sscanf(line, "block %d %d %d %d", &b.ms, &b.start, &b.end, &b.stall)
				blocks = append(blocks, b)
			}
			if err != nil {
				t.Fatalf("node printed %q: %v", line, err)
			}
		}
		if mainEnd == 0 {
			t.Fatalf("node printed no end of its main script: %s", out)
		}
		if len(blocks) != 41 {
			t.Fatalf("node ran %d blocks: %s", len(blocks), out)
		}
		blocks[0].before = firstWait
		for k := 1; k < len(blocks); k++ {
			blocks[k].before = blocks[k-1].stall
		}
		pid := int64(cmd.Process.Pid)
		var recs []scopeLog
		// Until the last 200 ms block's record too: a 20 ms block stalled
		// past min_duration on a loaded host adds a record, which must not
		// end the wait before the last one came.
		last := blocks[len(blocks)-2].start
		waitFor(5*time.Second, func() bool {
			recs = recordsByPID(flatten(sink), "callback")[pid]
			seenLast := false
			for _, l := range recs {
				if l.startUnix-offset >= last-int64(5*time.Millisecond)-blocks[len(blocks)-2].before {
					seenLast = true
				}
			}
			return len(recs) >= 20 && seenLast
		})
		time.Sleep(2 * pollInterval)
		recs = recordsByPID(flatten(sink), "callback")[pid]
		// Each record belongs to the block starting right after it: the
		// scope opens before the callback runs. The main script and the
		// last callback are scopes too, short on an idle machine: on a
		// loaded one their run-queue wait can carry them past min_duration.
		byBlock := map[int][]scopeLog{}
		var others []otherScope
		for _, l := range recs {
			start := l.startUnix - offset
			switch {
			case start < mainEnd:
				others = append(others, otherScope{"the main script", l, mainWait})
				continue
			case start > blocks[len(blocks)-1].start:
				others = append(others, otherScope{"the last callback", l, blocks[len(blocks)-1].stall + lastWait})
				continue
			}
			k := sort.Search(len(blocks), func(i int) bool { return blocks[i].start >= start })
			if k == len(blocks) || blocks[k].start-start > int64(5*time.Millisecond)+blocks[k].before {
				where := "after the last block began"
				if k < len(blocks) {
					where = fmt.Sprintf("%s before block %d (%d ms) began, %s run-queue wait before it", time.Duration(blocks[k].start-start), k, blocks[k].ms, time.Duration(blocks[k].before))
				}
				t.Errorf("run %d: record of %s starting outside every block: %s", run, time.Duration(l.durationNs), where)
				continue
			}
			byBlock[k] = append(byBlock[k], l)
		}
		var worst, worstRaw, maxStall time.Duration
		for k, b := range blocks {
			stall := time.Duration(b.stall + b.before)
			want := time.Duration(b.end - b.start)
			got := byBlock[k]
			if b.ms == 20 && len(got) == 0 {
				continue
			}
			if len(got) != 1 {
				t.Errorf("run %d: block %d (%d ms): %d records, want 1", run, k, b.ms, len(got))
				continue
			}
			d := time.Duration(got[0].durationNs) - want
			if b.ms == 20 && stall+want+2*time.Millisecond < 50*time.Millisecond {
				t.Errorf("run %d: block %d (20 ms, %s stalled) recorded as %s, under min_duration", run, k, stall, time.Duration(got[0].durationNs))
				continue
			}
			if d < -2*time.Millisecond || d > 2*time.Millisecond+stall {
				t.Errorf("run %d: block %d (%d ms, %s stalled) recorded as %s, want %s ± 2ms; scope began %s before the block, ended %s after", run, k, b.ms, stall, time.Duration(got[0].durationNs), want,
					time.Duration(b.start-(got[0].startUnix-offset)), time.Duration(got[0].startUnix-offset+got[0].durationNs-b.end))
			}
			if b.ms == 200 {
				worst = max(worst, max(d, -d)-stall)
				worstRaw = max(worstRaw, max(d, -d))
				maxStall = max(maxStall, stall)
			}
		}
		seen := map[string]bool{}
		for _, o := range others {
			d := time.Duration(o.rec.durationNs)
			t.Logf("run %d: the scope of %s recorded as %s, with %s run-queue wait around it", run, o.what, d, time.Duration(o.wait))
			if seen[o.what] {
				t.Errorf("run %d: two records for the scope of %s", run, o.what)
			}
			seen[o.what] = true
			// Recorded only because the wait carried it past min_duration.
			if d-time.Duration(o.wait) >= 50*time.Millisecond {
				t.Errorf("run %d: the scope of %s recorded as %s, at least 50 ms beyond the %s run-queue wait around it", run, o.what, d, time.Duration(o.wait))
			}
		}
		t.Logf("run %d: %d records; 200 ms blocks off by at most %s (%s beyond their own run-queue wait, which was at most %s)",
			run, len(recs), worstRaw, worst, maxStall)
	}
	if got := time.Duration(st.lookupCPUNanos.Load()); got != lookupCPU || st.evaluations.Load() != evaluations {
		t.Errorf("node processes cost lookups: CPU %s -> %s, evaluations %d -> %d", lookupCPU, got, evaluations, st.evaluations.Load())
	}
}

// TestRefusedProbeNotRetried probes getaddrinfo+0x3, inside libc's first
// instruction, which cannot be attached there: libc is evaluated once, and
// the refusal is remembered for that file and probe, not retried for each
// of 20 processes (issue 14).
func TestRefusedProbeNotRetried(t *testing.T) {
	getent, err := exec.LookPath("getent")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &Config{
		Probes: []ProbeConfig{{ID: "bad", FileMatch: `/libc\.so\.6$`, Entry: "getaddrinfo+0x3", Exit: "return"}},
		Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour},
	}
	r, sink := startReceiver(t, cfg, options{})
	st := &r.tracker.stats
	base := st.evaluations.Load()
	const runs = 20
	var last int
	for range runs {
		cmd := exec.Command(getent, "ahosts", "localhost")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("getent: %v: %s", err, out)
		}
		last = cmd.Process.Pid
	}
	// Events are handled in order: once the last process's exit is read,
	// every exec and mapping of the runs was handled (a fixed wait could
	// check before, and pass without looking).
	if !waitFor(10*time.Second, func() bool { return trackerSawExit(r.tracker, last) }) {
		t.Fatalf("the tracker never read the exit of pid %d", last)
	}
	t.Logf("libc evaluations: %d at start, %d after %d processes; %d known failures skipped, %d negative cache hits",
		base, st.evaluations.Load(), runs, st.knownFailures.Load(), st.negativeHits.Load())
	if base != 1 || st.evaluations.Load() != base {
		t.Errorf("libc evaluated %d times at start and %d after %d processes, want once", base, st.evaluations.Load()-base, runs)
	}
	if n := len(flatten(sink)); n != 0 {
		t.Errorf("%d records from a probe that cannot be attached", n)
	}
	if binaries, _ := r.tracker.attachedTotals(); binaries != 0 {
		t.Errorf("%d binaries attached", binaries)
	}
}

// TestMappingOfExitedProcessAttached hands the tracker a mapping event of a
// process that is gone by the time the event is read, as happens to a
// process that dlopens a library, calls it and exits while the attach
// waits its turn: the library is still attached (opened by path, checked
// against the identity the event carries), its latency taken and the
// process counted as exited before the attach. Opening it only through
// the process's root lost it silently.
func TestMappingOfExitedProcessAttached(t *testing.T) {
	built := testworkload.BuildC(t, "dlib.c", "-O2", "-g", "-shared", "-fPIC")
	lib := filepath.Join(t.TempDir(), "libgone.so")
	cfg := &Config{
		// Not anchored: no directory is watched, the mapping is the only
		// way the library is found.
		Probes: []ProbeConfig{{ID: "gone", FileMatch: regexp.QuoteMeta(lib) + "$", Entry: "lib_call", Exit: "return"}},
		Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour},
	}
	r, _ := startReceiver(t, cfg, options{})
	copyFile(t, built, lib)
	file := fileIDOf(t, lib)
	// A process that has exited and been reaped.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	pid := gone.Process.Pid
	if process.Running(pid) {
		t.Fatalf("pid %d still runs", pid)
	}
	// Its own exec and exit events reach the tracker too, and an exec read
	// while the mapping below is evaluated would end that evaluation as a
	// new image, not an exit: let them arrive first.
	if !waitFor(10*time.Second, func() bool { return trackerSawExit(r.tracker, pid) }) {
		t.Fatalf("the tracker never read the exit of pid %d", pid)
	}
	st := &r.tracker.stats
	lost := st.exitedBeforeAttach.Load()
	r.tracker.mapped(pid, file, lib, uint64(ktime.MonotonicNanos()))
	if !r.tracker.isAttached(file.FileKey) {
		t.Fatal("the library mapped by a process gone before its event was read is not attached")
	}
	if got := st.exitedBeforeAttach.Load() - lost; got != 1 {
		t.Errorf("%d processes counted as exited before attach, want 1", got)
	}
	if n, _, _ := r.tracker.latency.percentiles(triggerMapping); n != 1 {
		t.Errorf("%d mapping latency samples, want 1", n)
	}
	// Without a path (mappings seen through sys_exit or fentry), a gone
	// process leaves the file unnamed: counted, not silent. The running
	// receiver's tracker counts every other process on the host that maps
	// a file and exits before its event is read as well: this is counted
	// by a tracker of its own that reads no events.
	own, err := newTracker(zaptest.NewLogger(t), cfg.Probes, probesAttacher{r.probes}, nil, process.NewInfoCache(64),
		trackerOptions{retain: cfg.Retain, mappingEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.close)
	other := filepath.Join(filepath.Dir(lib), "libother.so")
	copyFile(t, built, other)
	otherFile := fileIDOf(t, other)
	own.mapped(pid, otherFile, "", uint64(ktime.MonotonicNanos()))
	if got := own.stats.mappingsUnnamed.Load(); got != 1 {
		t.Errorf("%d unnamed mappings counted for a pathless event of a gone process, want 1", got)
	}
}

// TestExecReadAfterAttachCountsLatency hands the tracker an exec event of
// a binary written into a watched directory, timed 5 ms before the attach
// its write started had finished, but read after it, as happens when the
// exec comes while that attach is under way and the tracker reads its
// event late (busy, or starved of a CPU): the process ran unprobed until
// the attach, so its exec-to-attach latency is recorded, as for an exec
// read while the attach was still under way. It was lost: the binary was
// found attached, and the exec counted as covered.
func TestExecReadAfterAttachCountsLatency(t *testing.T) {
	built := testworkload.BuildC(t, "shortcalls.c", "-O2", "-g")
	dir := t.TempDir()
	bin := filepath.Join(dir, "shortcalls")
	cfg := &Config{
		Probes: []ProbeConfig{{ID: "late", FileMatch: "^" + regexp.QuoteMeta(dir) + "/[^/]+$", Entry: "short_call", Exit: "return"}},
		Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour},
	}
	r, _ := startReceiver(t, cfg, options{})
	copyFile(t, built, bin)
	file := fileIDOf(t, bin)
	if !waitFor(10*time.Second, func() bool { return r.tracker.isAttached(file.FileKey) }) {
		t.Fatal("the binary written into the watched directory was not attached")
	}
	r.tracker.mu.Lock()
	attachedAt := r.tracker.binaries[file.FileKey].attachedAt
	r.tracker.mu.Unlock()
	// A process of the binary, whose exec event (read by now) came after
	// the attach: no latency.
	cmd := testworkload.Start(t, bin, "1", strconv.Itoa(int(time.Minute/time.Microsecond)))
	if !waitFor(10*time.Second, func() bool { _, h := r.tracker.attachedCount(file.FileKey); return h == 1 }) {
		t.Fatal("the process of the attached binary was not seen")
	}
	n0, _, _ := r.tracker.latency.percentiles(triggerExec)
	const early = 5 * time.Millisecond
	r.tracker.exec(cmd.Process.Pid, file, bin, uint64(attachedAt-int64(early)))
	n, p50, _ := r.tracker.latency.percentiles(triggerExec)
	if n != n0+1 {
		t.Fatalf("%d exec-to-attach latencies recorded for an exec %s before the attach, read after it; want 1", n-n0, early)
	}
	if p50 < early || p50 > 2*early {
		t.Errorf("exec-to-attach latency %s for an exec %s before the attach", p50, early)
	}
}

// trackerSawExit reports whether tr has read pid's exit event.
func trackerSawExit(tr *tracker, pid int) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, e := range tr.exited {
		if e.pid == pid {
			return true
		}
	}
	return false
}

// TestMappingReadBeforeExitAttached evaluates a library mapping read from a
// live process that exited before the library was opened, as happens to a
// process that dlopens a library, calls it and exits while the library is
// planned (a path-less mapping event, read from /proc/PID/maps): the
// library is still attached, opened by path and checked against the
// identity its mapping had, and the process counted as exited before the
// attach. Opening it only through the process (map_files, its root) lost
// it silently.
func TestMappingReadBeforeExitAttached(t *testing.T) {
	built := testworkload.BuildC(t, "dlib.c", "-O2", "-g", "-shared", "-fPIC")
	bin := testworkload.BuildC(t, "dlopener.c", "-O2", "-g")
	lib := filepath.Join(t.TempDir(), "libreadgone.so")
	copyFile(t, built, lib)
	file := fileIDOf(t, lib)
	// It loads the library at once and calls it for 100 s.
	cmd := testworkload.Start(t, bin, lib, "0", "100000", os.DevNull)
	pid := cmd.Process.Pid
	var mapping *process.Mapping
	if !waitFor(10*time.Second, func() bool {
		maps, err := process.ReadMappings(pid)
		if err != nil {
			return false
		}
		for i := range maps {
			if maps[i].File() && maps[i].Executable() && maps[i].Key() == file.FileKey {
				mapping = &maps[i]
				return true
			}
		}
		return false
	}) {
		t.Fatalf("pid %d never mapped %s", pid, lib)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// Started after the process is gone: none of its events reach the
	// tracker, which sees only the mapping handed to it below.
	cfg := &Config{
		Probes: []ProbeConfig{{ID: "readgone", FileMatch: regexp.QuoteMeta(lib) + "$", Entry: "lib_call", Exit: "return"}},
		Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour},
	}
	r, _ := startReceiver(t, cfg, options{})
	matched := r.tracker.matching(pid, mapping.Path)
	if len(matched) != 1 {
		t.Fatalf("%d probes match %s", len(matched), mapping.Path)
	}
	st := &r.tracker.stats
	lost := st.exitedBeforeAttach.Load()
	r.tracker.attachTo(pid, mappingTarget(pid, mapping, file), matched, uint64(ktime.MonotonicNanos()), triggerMapping)
	if !r.tracker.isAttached(file.FileKey) {
		t.Fatal("the library of a process gone after its mappings were read was not attached")
	}
	if got := st.exitedBeforeAttach.Load() - lost; got != 1 {
		t.Errorf("%d processes counted as exited before the attach, want 1", got)
	}
}
