package ebpfprofreceiver

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/interp/hotspot"
	"github.com/bpfcol/bpfcol/internal/jfrtest"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// The JVM's tests run on a receiver started as for Python's (pythonRun:
// a receiver at 199 Hz, and the samples of one thread since its process
// was attached), with OpenJDK's java. The ground truth is the JVM's own
// sampler, JDK Flight Recorder, on the same run.

// javaChain is JavaChain.java's stack, leaf first: C2 inlines chainLeaf
// into chainMiddle.
var javaChain = []string{"JavaChain.chainLeaf", "JavaChain.chainMiddle", "JavaChain.chainOuter", "JavaChain.main"}

// javaFrame is a Java frame of a sample: its class and method, line,
// and the location it shares with the frames inlined into the same code.
type javaFrame struct {
	name     string
	line     int64
	location int
}

// javaFrames returns the sample's Java methods, leaf first: its frames
// typed jvm but the JVM's stubs, which have no descriptor.
func javaFrames(s pprofiletest.Sample) []javaFrame {
	var out []javaFrame
	for _, f := range s.Frames() {
		if f.Type == conventions.FrameTypeJVM && strings.Contains(f.Name, "(") {
			out = append(out, javaFrame{shortJavaName(f.Name), f.Line, f.Location})
		}
	}
	return out
}

// shortJavaName is a Java method's class and name, without its return
// and parameter types: "long JavaChain.chainLeaf(long)" is
// "JavaChain.chainLeaf".
func shortJavaName(name string) string {
	name, _, _ = strings.Cut(name, "(")
	if i := strings.LastIndexByte(name, ' '); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// hasJavaChain reports whether frames start with chain.
func hasJavaChain(frames []javaFrame, chain []string) bool {
	if len(frames) < len(chain) {
		return false
	}
	for i, n := range chain {
		if frames[i].name != n {
			return false
		}
	}
	return true
}

// startJava starts java with args, in a directory of its own.
func startJava(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	java := testenv.LookPath(t, "java")
	cmd := testworkload.Start(t, java, args...)
	return cmd
}

// waitJVM waits until each JVM is attached to the HotSpot client, and
// notes when: its samples carry Java frames from then on.
func (p *pythonRun) waitJVM(cmds ...*exec.Cmd) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, cmd := range cmds {
		pid := cmd.Process.Pid
		for !p.r.interps.Attached(uint32(pid)) {
			if time.Now().After(deadline) {
				p.t.Fatalf("JVM %d not attached within 30 s: %+v", pid, p.r.interps.Stats())
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.attached[pid] = time.Now()
		p.t.Logf("JVM %d attached %v after the receiver started", pid, time.Since(p.started).Round(time.Millisecond))
	}
}

// stopJava stops a JVM the way a user does, SIGTERM: it writes its flight
// recording as it exits.
func stopJava(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := cmd.Process.Wait(); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("JVM %d did not exit within 60 s of SIGTERM", cmd.Process.Pid)
	}
}

// javaMainThread returns the thread that runs a JVM's main method: the
// java launcher runs it in the first thread it creates, which keeps the
// process's name.
func javaMainThread(t testing.TB, pid int) int {
	t.Helper()
	tids := namedThreads(pid)
	if len(tids) == 0 {
		t.Fatalf("JVM %d: no thread named as the process but its first", pid)
	}
	return slices.Min(tids)
}

// jvmShares are the shares of a thread's samples, as bpfcol and as JFR
// saw them over the same time.
type jvmShares struct {
	samples int64
	// leaves are the samples by their innermost Java method; inlined
	// those whose leaf was inlined into its caller (as JFR says: its
	// frame type; as bpfcol does: one location for both).
	leaves  map[string]int64
	inlined int64
	// chains counts the samples by their Java frames, with lines.
	chains map[string]int64
}

func newShares() *jvmShares {
	return &jvmShares{leaves: map[string]int64{}, chains: map[string]int64{}}
}

func (s *jvmShares) share(n int64) float64 { return float64(n) / float64(max(s.samples, 1)) }

// top returns the most common chain.
func (s *jvmShares) top() string {
	best, n := "", int64(-1)
	for c, k := range s.chains {
		if k > n || k == n && c < best {
			best, n = c, k
		}
	}
	return best
}

// chainKey is a stack's Java methods with their lines, but the leaf's
// without its line unless leafLine is set.
func chainKey(names []string, lines []int64, leafLine bool) string {
	var parts []string
	for i, n := range names {
		if i == 0 && !leafLine {
			parts = append(parts, n)
			continue
		}
		parts = append(parts, fmt.Sprintf("%s:%d", n, lines[i]))
	}
	return strings.Join(parts, ";")
}

// jfrShares counts JFR's samples of thread tid within [from, to].
func jfrShares(samples []jfrtest.Sample, tid int, from, to time.Time, leafLine bool) *jvmShares {
	s := newShares()
	for _, js := range samples {
		if js.TID != tid || js.Time.Before(from) || js.Time.After(to) || len(js.Frames) == 0 {
			continue
		}
		s.samples++
		s.leaves[js.Frames[0].Name()]++
		if js.Frames[0].Type == "Inlined" {
			s.inlined++
		}
		var names []string
		var lines []int64
		for _, f := range js.Frames {
			names, lines = append(names, f.Name()), append(lines, int64(f.Line))
		}
		s.chains[chainKey(names, lines, leafLine)]++
	}
	return s
}

// checkJavaChain asks, of the samples of JavaChain's main thread taken
// from its attach until the receiver stopped: at least 95% hold
// JavaChain.main, at least 85% the whole chain down to chainLeaf, in
// order and typed jvm; and compares them with JFR's samples of the same
// thread over the same time: the share of each leaf method within 10
// points, and the share of the leaf inlined, and the most common stack
// with its lines the same (the leaf's too with leafLine: an interpreted
// leaf's line is the bytecode running, which bpfcol reads from the
// interpreter's register and JFR from the frame, where the interpreter
// saves it only across calls). It returns the shares bpfcol saw.
func checkJavaChain(t *testing.T, run *pythonRun, cmd *exec.Cmd, tid int, recording string, stopped time.Time, leafLine bool) *jvmShares {
	t.Helper()
	pid := cmd.Process.Pid
	ours := newShares()
	var root, whole int64
	var bad []string
	for _, s := range run.threadSamples(pid, tid) {
		frames := javaFrames(s)
		ours.samples += s.Count
		if slices.ContainsFunc(frames, func(f javaFrame) bool { return f.name == "JavaChain.main" }) {
			root += s.Count
		}
		if hasJavaChain(frames, javaChain) {
			whole += s.Count
		} else if len(bad) < 4 {
			bad = append(bad, shortChain(s.UserNames()))
		}
		if len(frames) == 0 {
			continue
		}
		ours.leaves[frames[0].name] += s.Count
		if len(frames) > 1 && frames[0].location == frames[1].location {
			ours.inlined += s.Count
		}
		var names []string
		var lines []int64
		for _, f := range frames {
			names, lines = append(names, f.name), append(lines, f.line)
		}
		ours.chains[chainKey(names, lines, leafLine)] += s.Count
	}
	t.Logf("bpfcol: %d samples of thread %d, %.1f%% hold JavaChain.main, %.1f%% the whole chain, %.1f%% with the leaf inlined",
		ours.samples, tid, pct(root, ours.samples), pct(whole, ours.samples), pct(ours.inlined, ours.samples))
	if ours.samples < 200 {
		t.Fatalf("%d samples of the main thread: too few to judge", ours.samples)
	}
	if float64(root) < 0.95*float64(ours.samples) {
		t.Errorf("%.1f%% of samples hold JavaChain.main, want >= 95%%; some that do not: %v", pct(root, ours.samples), bad)
	}
	if float64(whole) < 0.85*float64(ours.samples) {
		t.Errorf("%.1f%% of samples hold the chain %v, want >= 85%%; some that do not: %v", pct(whole, ours.samples), javaChain, bad)
	}

	jfr := jfrShares(jfrtest.Read(t, recording), tid, run.attached[pid], stopped, leafLine)
	t.Logf("JFR: %d samples of thread %d over the same time, %.1f%% with the leaf inlined", jfr.samples, tid, 100*jfr.share(jfr.inlined))
	if jfr.samples < 100 {
		t.Fatalf("JFR took %d samples of thread %d over the run: too few to judge", jfr.samples, tid)
	}
	var leaves []string
	for _, m := range []map[string]int64{ours.leaves, jfr.leaves} {
		for l := range m {
			if !slices.Contains(leaves, l) {
				leaves = append(leaves, l)
			}
		}
	}
	sort.Strings(leaves)
	for _, l := range leaves {
		a, b := ours.share(ours.leaves[l]), jfr.share(jfr.leaves[l])
		if a < 0.01 && b < 0.01 {
			continue
		}
		t.Logf("leaf %-28s bpfcol %5.1f%%, JFR %5.1f%%", l, 100*a, 100*b)
		if math.Abs(a-b) > 0.10 {
			t.Errorf("leaf %s: %.1f%% of bpfcol's samples, %.1f%% of JFR's: more than 10 points apart", l, 100*a, 100*b)
		}
	}
	if a, b := ours.share(ours.inlined), jfr.share(jfr.inlined); math.Abs(a-b) > 0.10 {
		t.Errorf("leaf inlined into its caller in %.1f%% of bpfcol's samples, %.1f%% of JFR's: more than 10 points apart", 100*a, 100*b)
	}
	if a, b := ours.top(), jfr.top(); a != b {
		t.Errorf("most common stack: bpfcol %s (%.1f%%), JFR %s (%.1f%%)", a, 100*ours.share(ours.chains[a]), b, 100*jfr.share(jfr.chains[b]))
	} else {
		t.Logf("most common stack, both: %s", a)
	}
	return ours
}

// waitFile waits for the file a workload creates when it starts its work,
// for at most limit, and notes the time as the process's attach when it
// is later: its samples are judged from then on.
func (p *pythonRun) waitFile(path string, limit time.Duration, cmd *exec.Cmd) {
	p.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not created within %v", path, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if now, pid := time.Now(), cmd.Process.Pid; now.After(p.attached[pid]) {
		p.attached[pid] = now
	}
}

// runJavaChain profiles JavaChain run with the JVM options opts and JFR
// recording it, for cpu of its main thread's time once attached and in
// its main method, and checks it (checkJavaChain).
func runJavaChain(t *testing.T, cpu time.Duration, leafLine bool, opts ...string) *jvmShares {
	run := startPythonRun(t)
	dir := testworkload.BuildJava(t, "JavaChain.java")
	recording := filepath.Join(t.TempDir(), "run.jfr")
	started := filepath.Join(t.TempDir(), "started")
	args := append(append([]string{jfrtest.Flag(recording)}, opts...), "-cp", dir, "JavaChain", started)
	cmd := startJava(t, args...)
	run.waitJVM(cmd)
	// A loaded host took 16 s to start a JVM recording itself.
	run.waitFile(started, 90*time.Second, cmd)
	tid := javaMainThread(t, cmd.Process.Pid)
	run.runThreadsFor(cpu, 4*cpu, [2]int{cmd.Process.Pid, tid})
	run.stop()
	stopped := time.Now()
	stopJava(t, cmd)
	return checkJavaChain(t, run, cmd, tid, recording, stopped, leafLine)
}

// TestJVMCompiledChain profiles JavaChain long enough for C2 to compile it
// with chainLeaf inlined: 25 s of its main thread.
func TestJVMCompiledChain(t *testing.T) {
	s := runJavaChain(t, 25*time.Second, true)
	// C2's code must have been sampled: the leaf inlined into its caller.
	if s.share(s.inlined) < 0.3 {
		t.Errorf("the leaf was inlined into its caller in %.1f%% of samples: C2's code was hardly sampled", 100*s.share(s.inlined))
	}
}

// TestJVMInterpretedChain profiles JavaChain run by the template
// interpreter alone (-Xint): the same chain, each method a frame of its
// own.
func TestJVMInterpretedChain(t *testing.T) {
	s := runJavaChain(t, 8*time.Second, false, "-Xint")
	if s.inlined != 0 {
		t.Errorf("%d samples of an interpreted chain had a method inlined into another", s.inlined)
	}
}

// TestJVMStartedBefore profiles a JVM started, with no option at all,
// before the receiver: its frames are walked from its attach on.
func TestJVMStartedBefore(t *testing.T) {
	testenv.RequireBPF(t)
	dir := testworkload.BuildJava(t, "JavaChain.java")
	started := filepath.Join(t.TempDir(), "started")
	cmd := startJava(t, "-cp", dir, "JavaChain", started)
	// The JVM runs the chain before the receiver starts.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not created within 90 s", started)
		}
	}
	run := startPythonRun(t)
	run.waitJVM(cmd)
	run.waitFile(started, 90*time.Second, cmd)
	tid := javaMainThread(t, cmd.Process.Pid)
	run.runThreadsFor(8*time.Second, 40*time.Second, [2]int{cmd.Process.Pid, tid})
	run.stop()
	var total, whole, complete int64
	var bad []string
	for _, s := range run.threadSamples(cmd.Process.Pid, tid) {
		total += s.Count
		if hasJavaChain(javaFrames(s), javaChain) {
			whole += s.Count
		} else if len(bad) < 4 {
			bad = append(bad, shortChain(s.UserNames()))
		}
		if completeStack(s.UserNames()) {
			complete += s.Count
		}
	}
	t.Logf("%d samples, %.1f%% hold the chain, %.1f%% complete", total, pct(whole, total), pct(complete, total))
	if total < 200 {
		t.Fatalf("%d samples: too few to judge", total)
	}
	if float64(whole) < 0.85*float64(total) {
		t.Errorf("%.1f%% of samples hold the chain %v, want >= 85%%; some that do not: %v", pct(whole, total), javaChain, bad)
	}
	if float64(complete) < 0.85*float64(total) {
		t.Errorf("%.1f%% of samples reach the thread's root, want >= 85%%", pct(complete, total))
	}
	if s := run.r.interps.Stats().Clients[hotspot.Name]; s.Attached < 1 || s.Unnamed > s.Named/100 {
		t.Errorf("HotSpot client: %+v", s)
	}
}
