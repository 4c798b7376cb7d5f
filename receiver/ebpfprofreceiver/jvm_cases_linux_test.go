package ebpfprofreceiver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/uproberecv"
)

// TestJVMOffCPU profiles JavaSleeper, which sleeps a millisecond at a time
// in main -> napOuter -> napLeaf -> Thread.sleep, with off-CPU profiling
// on: its main thread's off-CPU samples hold that chain, Thread.sleep
// innermost, whether it ran interpreted (its first calls) or compiled.
func TestJVMOffCPU(t *testing.T) {
	dir := testworkload.BuildJava(t, "JavaSleeper.java")
	run := startPythonRun(t, func(c *Config, _ *profilesReceiver) {
		c.OffCPU.Enabled = true
		c.OffCPU.Probability = 0.3
	})
	started := filepath.Join(t.TempDir(), "started")
	cmd := startJava(t, "-cp", dir, "JavaSleeper", started)
	run.waitJVM(cmd)
	run.waitFile(started, 90*time.Second, cmd)
	tid := javaMainThread(t, cmd.Process.Pid)
	time.Sleep(6 * time.Second)
	run.stop()
	chain := []string{"java.lang.Thread.sleep", "JavaSleeper.napLeaf", "JavaSleeper.napOuter", "JavaSleeper.main"}
	since := uint64(run.attached[cmd.Process.Pid].UnixNano())
	var total, right int64
	var bad []string
	for _, p := range run.sink.AllProfiles() {
		for _, s := range pprofiletest.Samples(p) {
			if s.PID != int64(cmd.Process.Pid) || s.SampleType != "off_cpu/nanoseconds" || len(s.ThreadIDs) == 0 || s.ThreadIDs[0] != int64(tid) {
				continue
			}
			var n int64
			for _, ts := range s.Timestamps {
				if ts >= since {
					n++
				}
			}
			total += n
			if hasJavaChain(javaFrames(s), chain) {
				right += n
			} else if n > 0 && len(bad) < 3 {
				bad = append(bad, shortChain(s.UserNames()))
			}
		}
	}
	t.Logf("%d off-CPU samples of the main thread, %d in %v", total, right, chain)
	if total < 20 || float64(right) < 0.9*float64(total) {
		t.Errorf("%d of %d off-CPU samples hold the chain; some that do not: %v", right, total, bad)
	}
}

// writeJavaTree writes n Java classes in package gen under dir, each with
// methods enough to keep javac busy a few seconds, and returns their paths.
func writeJavaTree(t *testing.T, dir string, n int) []string {
	t.Helper()
	pkg := filepath.Join(dir, "gen")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := range n {
		var b strings.Builder
		fmt.Fprintf(&b, "package gen;\nimport java.util.*;\npublic class C%d {\n", i)
		for m := range 12 {
			fmt.Fprintf(&b, "  public static <T extends Comparable<T>> List<T> m%d(List<T> in, Map<String, List<T>> idx) {\n", m)
			fmt.Fprintf(&b, "    List<T> out = new ArrayList<>();\n    for (T x : in) { if (x.compareTo(in.get(0)) > %d) out.add(x); }\n", m)
			fmt.Fprintf(&b, "    idx.computeIfAbsent(\"k%d\", k -> new ArrayList<>()).addAll(out);\n", m)
			if i > 0 {
				fmt.Fprintf(&b, "    C%d.m%d(out, idx);\n", i-1, m)
			}
			b.WriteString("    return out.stream().sorted().toList();\n  }\n")
		}
		b.WriteString("}\n")
		p := filepath.Join(pkg, fmt.Sprintf("C%d.java", i))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// TestJVMRealProgram profiles the JDK's own compiler, javac, compiling a
// generated source tree as a user runs it (no option): its main thread's
// samples hold Java frames, named (with their source file), and javac's own packages
// (com.sun.tools.javac) hold the innermost Java frame of most of them.
func TestJVMRealProgram(t *testing.T) {
	javac := testenv.LookPath(t, "javac")
	src := t.TempDir()
	paths := writeJavaTree(t, src, 1500)
	run := startPythonRun(t)
	cmd := exec.Command(javac, append([]string{"-d", t.TempDir()}, paths...)...)
	cmd.Dir = src
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	run.waitJVM(cmd)
	// javac's main thread: wait for the launcher to start it.
	var tid int
	for deadline := time.Now().Add(30 * time.Second); tid == 0; {
		if tids := namedThreads(cmd.Process.Pid); len(tids) > 0 {
			tid = slices.Min(tids)
		} else if time.Now().After(deadline) {
			t.Fatal("javac's main thread not started within 30 s")
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	run.runThreadsFor(6*time.Second, 60*time.Second, [2]int{cmd.Process.Pid, tid})
	run.stop()
	cmd.Process.Kill()
	cmd.Wait()
	var total, withJava, named, inJavac int64
	leaves := map[string]int64{}
	fileless := map[string]int64{}
	for _, s := range run.threadSamples(cmd.Process.Pid, tid) {
		total += s.Count
		var java []pprofiletest.Frame
		for _, f := range s.Frames() {
			if f.Type == conventions.FrameTypeJVM && strings.Contains(f.Name, "(") {
				java = append(java, f)
			}
		}
		if len(java) == 0 {
			continue
		}
		withJava += s.Count
		if !slices.ContainsFunc(java, unnamedJava) {
			named += s.Count
		} else {
			for _, f := range java {
				if unnamedJava(f) {
					fileless[f.Name] += s.Count
				}
			}
		}
		leaf := shortJavaName(java[0].Name)
		leaves[leaf] += s.Count
		if strings.HasPrefix(leaf, "com.sun.tools.javac.") {
			inJavac += s.Count
		}
	}
	t.Logf("javac: %d samples of its main thread, %d with Java frames, %d all named, %d innermost in com.sun.tools.javac",
		total, withJava, named, inJavac)
	for _, l := range topKeys(leaves, 5) {
		t.Logf("  leaf %s: %d", l, leaves[l])
	}
	for _, l := range topKeys(fileless, 10) {
		t.Logf("  unnamed: %s: %d", l, fileless[l])
	}
	if total < 200 {
		t.Fatalf("%d samples: too few to judge (javac: %s)", total, stderr.String())
	}
	if float64(withJava) < 0.9*float64(total) || float64(named) < 0.95*float64(withJava) || float64(inJavac) < 0.5*float64(total) {
		t.Errorf("want >= 90%% of samples with Java frames, >= 95%% of those named, >= 50%% innermost in com.sun.tools.javac")
	}
}

// unnamedJava reports whether a Java frame lacks its name or its source
// file: the classes a lambda's call site spins ($$Lambda$N, hidden classes
// the JVM writes with no SourceFile attribute) have none to give.
func unnamedJava(f pprofiletest.Frame) bool {
	return strings.Contains(f.Name, "[unknown]") || f.File == "" && !strings.Contains(f.Name, "$$Lambda$")
}

// namedThreads returns the threads of pid but the first that bear the
// process's name: the java launcher's main thread among them.
func namedThreads(pid int) []int {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return nil
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var tids []int
	for _, e := range tasks {
		var tid int
		fmt.Sscan(e.Name(), &tid)
		c, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
		if err == nil && tid != pid && string(c) == string(comm) {
			tids = append(tids, tid)
		}
	}
	return tids
}

// topKeys returns the n keys of m with the largest counts.
func topKeys(m map[string]int64, n int) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return int(m[b] - m[a])
		}
		return strings.Compare(a, b)
	})
	return keys[:min(n, len(keys))]
}

// TestScopeProfilesJVM probes zlib's deflate under both receivers while
// JavaDeflate calls it from Java through java.util.zip.Deflater: the
// samples linked to its scopes hold the Java frames that called it,
// compressBlock under compressOuter under main.
func TestScopeProfilesJVM(t *testing.T) {
	libz := "/lib/x86_64-linux-gnu/libz.so.1"
	if _, err := os.Stat(libz); err != nil {
		t.Fatalf("zlib, which the JDK's libzip calls, not found: %v", err)
	}
	dir := testworkload.BuildJava(t, "JavaDeflate.java")
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	b := startBoth(t, cfg, []uproberecv.ProbeConfig{{ID: "deflate", Binary: libz, Entry: "deflate", Exit: "return"}}, false)
	stopped := false
	defer func() {
		if !stopped {
			b.stop(t)
		}
	}()
	cmd := startJava(t, "-cp", dir, "JavaDeflate")
	deadline := time.Now().Add(60 * time.Second)
	for !b.prof.interps.Attached(uint32(cmd.Process.Pid)) || len(b.records("deflate")) < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("within 60 s: attached %v, %d records", b.prof.interps.Attached(uint32(cmd.Process.Pid)), len(b.records("deflate")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(6 * time.Second)
	stopJava(t, cmd)
	time.Sleep(2 * cfg.ReportInterval)
	b.stop(t)
	stopped = true
	want := []string{"JavaDeflate.compressBlock", "JavaDeflate.compressOuter", "JavaDeflate.main"}
	var linked, right int64
	var bad []string
	for _, s := range b.samples(cmd.Process.Pid) {
		if s.SpanID == "" || s.SampleType != onCPUType {
			continue
		}
		frames := javaFrames(s)
		if len(frames) == 0 {
			continue // taken before the JVM was attached
		}
		linked += s.Count
		// The JDK's own Deflater methods lie between deflate and the
		// workload's methods.
		i := slices.IndexFunc(frames, func(f javaFrame) bool { return !strings.HasPrefix(f.name, "java.util.zip.") })
		if i > 0 && hasJavaChain(frames[i:], want) && s.Labels[conventions.ProbeID] == "deflate" {
			right += s.Count
		} else if len(bad) < 3 {
			bad = append(bad, shortChain(s.UserNames()))
		}
	}
	t.Logf("%d samples linked to deflate's scopes with Java frames, %d called from java.util.zip then %v", linked, right, want)
	if linked < 20 || float64(right) < 0.95*float64(linked) {
		t.Errorf("%d of %d linked samples hold the Java callers; some that do not: %v", right, linked, bad)
	}
}

// TestJVMInterpretersOff runs JavaChain under a receiver whose
// interpreters leave hotspot out: the JVM is not attached, and its main
// thread's samples carry no Java frame, only native ones (its code cache
// unnamed addresses) down from the JVM's own native code.
func TestJVMInterpretersOff(t *testing.T) {
	dir := testworkload.BuildJava(t, "JavaChain.java")
	run := startPythonRun(t, func(c *Config, _ *profilesReceiver) {
		c.Interpreters = []string{"cpython"}
	})
	started := filepath.Join(t.TempDir(), "started")
	cmd := startJava(t, "-cp", dir, "JavaChain", started)
	run.waitFile(started, 90*time.Second, cmd)
	tid := javaMainThread(t, cmd.Process.Pid)
	run.runThreadsFor(3*time.Second, 30*time.Second, [2]int{cmd.Process.Pid, tid})
	run.stop()
	var total, java int64
	for _, s := range run.threadSamples(cmd.Process.Pid, tid) {
		total += s.Count
		if slices.ContainsFunc(s.Frames(), func(f pprofiletest.Frame) bool { return f.Type == conventions.FrameTypeJVM }) {
			java += s.Count
		}
	}
	t.Logf("interpreters [cpython]: %d samples of JavaChain's main thread, %d with a frame typed jvm; attached: %v",
		total, java, run.r.interps.Attached(uint32(cmd.Process.Pid)))
	if total < 100 {
		t.Fatalf("%d samples: too few to judge", total)
	}
	if java != 0 || run.r.interps.Attached(uint32(cmd.Process.Pid)) {
		t.Errorf("with hotspot left out of interpreters, %d samples had Java frames (attached %v)", java, run.r.interps.Attached(uint32(cmd.Process.Pid)))
	}
}
