package ebpfprofreceiver

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/uproberecv"
)

// startPiped starts a Python script and returns it with its standard
// output to read; it is stopped with SIGUSR1 or killed at the end.
func startPiped(t *testing.T, py testworkload.Python, script string, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(py.Path, append([]string{script}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// stopPython ends a script with SIGUSR1 and waits for it.
func stopPython(t *testing.T, cmds ...*exec.Cmd) {
	t.Helper()
	for _, c := range cmds {
		if err := c.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("%s: %v", c.Path, err)
		}
	}
}

// hasPyFrame reports whether the sample's CPython frames hold f.
func hasPyFrame(s pprofiletest.Sample, f pyFrame) bool {
	return slices.Contains(pythonFrames(s), f)
}

// TestPythonThreads profiles two threads busy in different functions, in
// CPython 3.12 (thread states through pthread-specific data), 3.13 (a
// thread-local of libpython, through the DTV of each thread) and Debian's
// static 3.11: each thread's own function is in its samples, the other's
// never.
func TestPythonThreads(t *testing.T) {
	pythons := []testworkload.Python{testworkload.PyenvPython(t, 12), testworkload.PyenvPython(t, 13), testworkload.Debian311(t)}
	run := startPythonRun(t)
	script := testworkload.PythonScript(t, "threads.py")
	alpha, beta := pyFrame{"alpha_spin", 7}, pyFrame{"beta_spin", 10}
	var cmds []*exec.Cmd
	var threads [][2]int
	for _, py := range pythons {
		cmd, out := startPiped(t, py, script)
		if !out.Scan() {
			t.Fatalf("%s: no thread ids", py.Name)
		}
		var a, b int
		if _, err := fmtSscan(out.Text(), &a, &b); err != nil {
			t.Fatalf("%s: %q: %v", py.Name, out.Text(), err)
		}
		cmds = append(cmds, cmd)
		threads = append(threads, [2]int{cmd.Process.Pid, a}, [2]int{cmd.Process.Pid, b})
	}
	run.waitAttached(cmds...)
	run.runThreadsFor(1500*time.Millisecond, 60*time.Second, threads...)
	stopPython(t, cmds...)
	run.stop()
	for i, py := range pythons {
		for j, own := range []pyFrame{alpha, beta} {
			other := []pyFrame{beta, alpha}[j]
			th := threads[2*i+j]
			var total, withOwn, withOther int64
			for _, s := range run.threadSamples(th[0], th[1]) {
				total += s.Count
				if hasPyFrame(s, own) {
					withOwn += s.Count
				}
				if hasPyFrame(s, other) {
					withOther += s.Count
				}
			}
			t.Logf("%-14s thread %s: %d samples, %d in %s, %d in %s", py.Name, own.name, total, withOwn, own, withOther, other)
			switch {
			case total < 50:
				t.Errorf("%s thread %s: only %d samples", py.Name, own.name, total)
			case withOther > 0:
				t.Errorf("%s thread %s: %d samples hold the other thread's %s", py.Name, own.name, withOther, other)
			case float64(withOwn) < 0.95*float64(total):
				t.Errorf("%s thread %s: %d of %d samples hold %s", py.Name, own.name, withOwn, total, own)
			}
		}
	}
}

// fmtSscan reads two ints.
func fmtSscan(s string, a, b *int) (int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, io.ErrUnexpectedEOF
	}
	var err error
	if *a, err = strconv.Atoi(f[0]); err != nil {
		return 0, err
	}
	*b, err = strconv.Atoi(f[1])
	return 2, err
}

// TestPythonDeepRecursion profiles a recursion 600 frames deep, in
// CPython 3.12 (one loop call runs them all) and 3.9 (each its own, five
// native frames apiece, far past the native frames a sample holds): the
// samples hold exactly the 512 innermost frames, then one [truncated]
// frame, and the walks are counted as truncated. It samples the process
// alone and logs the BPF time of such a sample.
func TestPythonDeepRecursion(t *testing.T) {
	for _, minor := range []int{12, 9} {
		py := testworkload.PyenvPython(t, minor)
		t.Run(py.Name, func(t *testing.T) {
			stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				t.Fatalf("enabling BPF statistics: %v", err)
			}
			defer stats.Close()
			bottom := filepath.Join(t.TempDir(), "bottom")
			script := testworkload.PythonScript(t, "deep.py")
			busy, recurse := scriptLine(t, script, "while running: pass"), scriptLine(t, script, "return deep(n - 1) + 1")
			cmd := testworkload.Start(t, py.Path, script, "600", bottom)
			// The recursion is reached before the sampler starts: it
			// samples the threads the process has then.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(bottom); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("deep.py did not reach its bottom within 30 s")
				}
			}
			run := startPythonRun(t, func(_ *Config, r *profilesReceiver) { r.hooks.samplePID = cmd.Process.Pid })
			run.waitAttached(cmd)
			rt0, n0, err := run.r.sampler.RunStats()
			if err != nil {
				t.Fatal(err)
			}
			run.runFor(2*time.Second, 60*time.Second, cmd)
			rt1, n1, _ := run.r.sampler.RunStats()
			stopPython(t, cmd)
			// Read once the process is gone: a walk counted after an
			// earlier read had its sample exported all the same (CI: 410
			// walks counted, 411 samples cut).
			c, _ := run.r.sampler.Counters()
			run.stop()
			pid := cmd.Process.Pid
			var total, whole int64
			var bad []string
			for _, s := range run.threadSamples(pid, pid) {
				total += s.Count
				if deepWhole(s, busy, recurse) {
					whole += s.Count
				} else if len(bad) < 3 {
					py := pythonFrames(s)
					bad = append(bad, strconv.Itoa(len(py))+" frames, ending "+pyTail(py))
				}
			}
			perSample := time.Duration(0)
			if n1 > n0 {
				perSample = (rt1 - rt0) / time.Duration(n1-n0)
			}
			t.Logf("%d samples, %d with the 512 innermost frames then [truncated]; walks truncated %d; BPF time per sample of the 600-deep stack %v (%d samples, host load %s)",
				total, whole, c.InterpStops[profiler.InterpStopTruncated], perSample, n1-n0, loadAverage(t))
			if total < 50 || float64(whole) < 0.95*float64(total) {
				t.Errorf("%d of %d samples hold 512 frames and the marker; some that do not: %v", whole, total, bad)
			}
			if c.InterpStops[profiler.InterpStopTruncated] < uint64(whole) {
				t.Errorf("%d walks counted as truncated, %d samples cut", c.InterpStops[profiler.InterpStopTruncated], whole)
			}
		})
	}
}

// deepWhole reports whether a sample of deep.py holds its 512 innermost
// frames, the hot one (at line busy) first and the recursive calls (at
// line recurse) after, then the truncation marker.
func deepWhole(s pprofiletest.Sample, busy, recurse int64) bool {
	py := pythonFrames(s)
	if len(py) != profiler.MaxInterpFrames+1 || py[0] != (pyFrame{"deep", busy}) || py[len(py)-1].name != interp.Truncated {
		return false
	}
	for _, f := range py[1 : len(py)-1] {
		if f != (pyFrame{"deep", recurse}) {
			return false
		}
	}
	return true
}

func pyTail(py []pyFrame) string {
	if len(py) == 0 {
		return "nothing"
	}
	return py[len(py)-1].String()
}

// TestPythonCExtension profiles Python calling C: zlib compressing (its
// frames sit leafward of the Python function that called it, with the
// Python callers after), and sorted() calling a Python key function (the
// key function leafward of list sorting's native frames, its caller
// rootward of them), in CPython 3.12 and 3.9.
func TestPythonCExtension(t *testing.T) {
	pythons := []testworkload.Python{testworkload.PyenvPython(t, 12), testworkload.PyenvPython(t, 9)}
	run := startPythonRun(t)
	script := testworkload.PythonScript(t, "cext.py")
	var cmds []*exec.Cmd
	for _, py := range pythons {
		cmds = append(cmds, testworkload.Start(t, py.Path, script))
	}
	run.waitAttached(cmds...)
	run.runFor(3*time.Second, 60*time.Second, cmds...)
	stopPython(t, cmds...)
	run.stop()
	zlibCallers := []pyFrame{{"compress_block", 7}, {"outer", 13}, {"<module>", 27}}
	keyCallers := []pyFrame{{"key_of", 9}, {"sort_block", 11}, {"outer", 14}, {"<module>", 27}}
	for i, py := range pythons {
		pid := cmds[i].Process.Pid
		var inZlib, zlibRight, inKey, keyRight int64
		var bad []string
		for _, s := range run.threadSamples(pid, pid) {
			frames := s.Frames()
			if z := frameIndex(frames, "zlib_compress"); z >= 0 {
				inZlib += s.Count
				// No Python frame leafward of the C code; its callers
				// right after it, in order.
				if firstPython(frames) > z && slices.Equal(pythonFrames(s), zlibCallers) {
					zlibRight += s.Count
				} else if len(bad) < 3 {
					bad = append(bad, shortChain(s.UserNames()))
				}
			}
			if py := pythonFrames(s); len(py) > 0 && py[0] == keyCallers[0] {
				inKey += s.Count
				// The key function, list sorting's C code, its caller.
				k, sort, caller := frameIndex(frames, "key_of"), frameIndex(frames, "list_sort_impl"), frameIndex(frames, "sort_block")
				if slices.Equal(py, keyCallers) && k < sort && sort < caller {
					keyRight += s.Count
				} else if len(bad) < 6 {
					bad = append(bad, shortChain(s.UserNames()))
				}
			}
		}
		t.Logf("%-14s %d samples in zlib, %d right; %d in the key function, %d right", py.Name, inZlib, zlibRight, inKey, keyRight)
		if inZlib < 30 || inKey < 10 {
			t.Errorf("%s: too few samples: %d in zlib, %d in the key function", py.Name, inZlib, inKey)
			continue
		}
		if float64(zlibRight) < 0.95*float64(inZlib) || float64(keyRight) < 0.95*float64(inKey) {
			t.Errorf("%s: %d of %d zlib samples, %d of %d key function samples in order; some not: %v",
				py.Name, zlibRight, inZlib, keyRight, inKey, bad)
		}
	}
}

// frameIndex returns the index of the first frame whose function starts
// with prefix, -1 if none.
func frameIndex(frames []pprofiletest.Frame, prefix string) int {
	return slices.IndexFunc(frames, func(f pprofiletest.Frame) bool { return strings.HasPrefix(f.Name, prefix) })
}

func firstPython(frames []pprofiletest.Frame) int {
	return slices.IndexFunc(frames, func(f pprofiletest.Frame) bool { return f.Type == conventions.FrameTypeCPython })
}

// TestPythonStartedBefore profiles a CPython 3.12 process that ran before
// the receiver started: it is attached at its first sample, and its
// samples hold crunch.py's chains as those of a process started after.
func TestPythonStartedBefore(t *testing.T) {
	py := testworkload.PyenvPython(t, 12)
	script := testworkload.PythonScript(t, "crunch.py")
	w := startCrunch(t, py, script)
	time.Sleep(time.Second)
	run := startPythonRun(t)
	run.waitAttached(w.cmd)
	run.runFor(3*time.Second, 60*time.Second, w.cmd)
	stopCrunch(t, w)
	run.stop()
	checkCrunch(t, run, w)
}

// TestPythonOffCPU profiles crunch's sleeping cousin with off-CPU
// profiling on, in CPython 3.12 and 3.13 (whose thread-local thread state
// is unset while the thread sleeps without the GIL: the pthread-specific
// one stands in): its off-CPU samples hold the chain it sleeps in.
func TestPythonOffCPU(t *testing.T) {
	pythons := []testworkload.Python{testworkload.PyenvPython(t, 12), testworkload.PyenvPython(t, 13)}
	run := startPythonRun(t, func(c *Config, _ *profilesReceiver) {
		c.OffCPU.Enabled = true
		c.OffCPU.Probability = 0.3
	})
	script := testworkload.PythonScript(t, "sleeper.py")
	var cmds []*exec.Cmd
	for _, py := range pythons {
		cmds = append(cmds, testworkload.Start(t, py.Path, script))
	}
	run.waitAttached(cmds...)
	time.Sleep(4 * time.Second)
	stopPython(t, cmds...)
	profiles := run.stop()
	chain := []pyFrame{{"nap_leaf", 6}, {"nap_outer", 8}, {"<module>", 19}}
	for i, py := range pythons {
		pid := int64(cmds[i].Process.Pid)
		since := uint64(run.attached[int(pid)].UnixNano())
		var total, right int64
		var bad []string
		for _, p := range profiles {
			for _, s := range pprofiletest.Samples(p) {
				if s.PID != pid || s.SampleType != "off_cpu/nanoseconds" {
					continue
				}
				var n int64
				for _, ts := range s.Timestamps {
					if ts >= since {
						n++
					}
				}
				total += n
				if slices.Equal(pythonFrames(s), chain) {
					right += n
				} else if len(bad) < 3 {
					bad = append(bad, shortChain(s.UserNames()))
				}
			}
		}
		t.Logf("%-14s %d off-CPU samples, %d in %v", py.Name, total, right, chain)
		if total < 20 || float64(right) < 0.9*float64(total) {
			t.Errorf("%s: %d of %d off-CPU samples hold the chain; some that do not: %v", py.Name, right, total, bad)
		}
	}
}

// TestPythonRealProgram profiles a standard-library tool run as a user
// would, Debian's python3.11 -m tokenize over a large Python file: its
// samples hold Python frames, named, and the tokenize module's own frames
// dominate them.
func TestPythonRealProgram(t *testing.T) {
	py := testworkload.Debian311(t)
	src := filepath.Join(t.TempDir(), "big.py")
	var big []byte
	files, _ := filepath.Glob("/usr/lib/python3.11/*.py")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			big = append(append(big, b...), '\n')
		}
		if len(big) > 8<<20 {
			break
		}
	}
	if err := os.WriteFile(src, big, 0o644); err != nil {
		t.Fatal(err)
	}
	run := startPythonRun(t)
	cmd := exec.Command(py.Path, "-m", "tokenize", src)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	run.waitAttached(cmd)
	run.runFor(3*time.Second, 60*time.Second, cmd)
	cmd.Process.Kill()
	cmd.Wait()
	run.stop()
	pid := cmd.Process.Pid
	var total, withPy, named, inModule int64
	for _, s := range run.threadSamples(pid, pid) {
		total += s.Count
		var py []pprofiletest.Frame
		for _, f := range s.Frames() {
			if f.Type == conventions.FrameTypeCPython {
				py = append(py, f)
			}
		}
		if len(py) == 0 {
			continue
		}
		withPy += s.Count
		if !slices.ContainsFunc(py, func(f pprofiletest.Frame) bool { return f.Name == "[unknown]" || f.File == "" }) {
			named += s.Count
		}
		if filepath.Base(py[0].File) == "tokenize.py" {
			inModule += s.Count
		}
	}
	t.Logf("python3.11 -m tokenize: %d samples, %d with Python frames, %d all named, %d with their innermost Python frame in tokenize.py",
		total, withPy, named, inModule)
	if total < 100 || float64(withPy) < 0.9*float64(total) || float64(named) < 0.95*float64(withPy) || float64(inModule) < 0.5*float64(total) {
		t.Errorf("want >= 90%% of samples with Python frames, >= 95%% of those named, >= 50%% in tokenize.py")
	}
}

// withPyVersion copies the libpython of pyenv's py into a directory of
// its own, its Py_Version set to hex, and returns the directory: run with
// it first in LD_LIBRARY_PATH, py is a CPython that says it is another.
func withPyVersion(t *testing.T, py testworkload.Python, hex uint32) string {
	t.Helper()
	libs, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(py.Path)), "lib", "libpython3.*.so.1.0"))
	if len(libs) != 1 {
		t.Fatalf("%s: libpython not found (%v)", py.Name, libs)
	}
	data, err := os.ReadFile(libs[0])
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(libs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var off int64 = -1
	for _, s := range syms {
		if s.Name != "Py_Version" {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value+4 <= p.Vaddr+p.Filesz {
				off = int64(s.Value - p.Vaddr + p.Off)
			}
		}
	}
	if off < 0 {
		t.Fatalf("%s: no Py_Version in the file", libs[0])
	}
	binary.LittleEndian.PutUint32(data[off:], hex)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(libs[0])), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPythonUnsupportedVersion runs CPython 3.13 whose libpython says it
// is 3.14, a version without a known layout: its samples keep their
// native frames, whole, and carry no Python frame; the process is counted
// as unsupported.
func TestPythonUnsupportedVersion(t *testing.T) {
	py := testworkload.PyenvPython(t, 13)
	dir := withPyVersion(t, py, 0x030e00f0) // 3.14.0 final
	run := startPythonRun(t)
	cmd := exec.Command(py.Path, testworkload.PythonScript(t, "crunch.py"), filepath.Join(t.TempDir(), "truth.txt"))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	deadline := time.Now().Add(20 * time.Second)
	for run.r.interps.Stats().Clients["cpython"].Unsupported == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the process was not refused within 20 s: %+v", run.r.interps.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Refused at its first sample, when the unwind tables of the files
	// its walks entered are being built: its stacks are counted once
	// they are.
	for !run.r.unwind.Ready(uint32(pid)) {
		if time.Now().After(deadline) {
			t.Fatalf("the unwind tables of its files were not loaded within 20 s: %+v", run.r.unwind.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	run.attached[pid] = time.Now()
	run.runFor(2*time.Second, 60*time.Second, cmd)
	stopPython(t, cmd)
	run.stop()
	var total, python, loop int64
	for _, s := range run.threadSamples(pid, pid) {
		total += s.Count
		if len(pythonFrames(s)) > 0 {
			python += s.Count
		}
		if slices.Contains(s.UserNames(), evalLoop) && completeStack(s.UserNames()) {
			loop += s.Count
		}
	}
	st := run.r.interps.Stats().Clients["cpython"]
	t.Logf("%d samples, %d with Python frames, %d whole through the eval loop; cpython processes %+v", total, python, loop, st)
	if python > 0 || total < 50 || float64(loop) < 0.9*float64(total) {
		t.Errorf("want native frames only, whole: %d of %d samples with Python frames, %d whole through the eval loop", python, total, loop)
	}
	if st.Attached != 0 && run.r.interps.Attached(uint32(pid)) {
		t.Errorf("the process was attached: %+v", st)
	}
}

// TestPythonCodeObjectReuse runs functions compiled anew every 4 s, each
// new code object where the last was freed (the script logs their
// addresses): the reuse is seen, and the samples are named after the
// function that ran when they were taken, but in report intervals that
// span a change (1 s reports).
func TestPythonCodeObjectReuse(t *testing.T) {
	py := testworkload.PyenvPython(t, 12)
	run := startPythonRun(t, func(c *Config, _ *profilesReceiver) { c.ReportInterval = time.Second })
	log := filepath.Join(t.TempDir(), "phases.txt")
	cmd := testworkload.Start(t, py.Path, testworkload.PythonScript(t, "reuse.py"), log, "4")
	run.waitAttached(cmd)
	time.Sleep(13 * time.Second)
	stopPython(t, cmd)
	run.stop()

	type phase struct {
		start float64
		name  string
		addr  string
	}
	var phases []phase
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("phase line %q", line)
		}
		at, _ := strconv.ParseFloat(f[0], 64)
		phases = append(phases, phase{at, f[1], f[2]})
	}
	reused := 0
	for i := 1; i < len(phases); i++ {
		if phases[i].addr == phases[i-1].addr {
			reused++
		}
	}
	if reused < 2 {
		t.Fatalf("only %d phases reused the previous code object's address (%v): the test proves nothing", reused, phases)
	}
	at := func(ts uint64) string {
		name := ""
		for _, p := range phases {
			if float64(ts)/1e9 >= p.start {
				name = p.name
			}
		}
		return name
	}
	pid := cmd.Process.Pid
	var total, right int64
	since := uint64(run.attached[pid].UnixNano())
	for _, prof := range run.sink.AllProfiles() {
		for _, s := range pprofiletest.Samples(prof) {
			py := pythonFrames(s)
			if s.PID != int64(pid) || len(py) == 0 || !strings.HasPrefix(py[0].name, "gen_") {
				continue
			}
			for _, ts := range s.Timestamps {
				if ts < since {
					continue
				}
				total++
				if py[0].name == at(ts) {
					right++
				}
			}
		}
	}
	st := run.r.interps.Stats().Clients["cpython"]
	t.Logf("%d phases, %d at the previous one's address; %d samples in them, %d named after the function that ran; %d code objects found reused",
		len(phases), reused, total, right, st.Reused)
	if st.Reused == 0 {
		t.Errorf("no reuse seen")
	}
	if total < 100 || float64(right) < 0.85*float64(total) {
		t.Errorf("%d of %d samples named after the function that ran", right, total)
	}
}

// TestScopeProfilesPython probes zlib's compress, in CPython 3.12's zlib
// module, under both receivers while cext.py calls it from Python: the
// samples linked to its scopes hold the Python frames that called it.
func TestScopeProfilesPython(t *testing.T) {
	py := testworkload.PyenvPython(t, 12)
	module, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(py.Path)), "lib", "python3.12", "lib-dynload", "zlib.cpython-312-*.so"))
	if len(module) != 1 {
		t.Fatalf("pyenv 3.12's zlib module not found: %v", module)
	}
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	b := startBoth(t, cfg, []uproberecv.ProbeConfig{{ID: "compress", Binary: module[0], Entry: "zlib_compress", Exit: "return"}}, false)
	stopped := false
	defer func() {
		if !stopped {
			b.stop(t)
		}
	}()
	cmd := testworkload.Start(t, py.Path, testworkload.PythonScript(t, "cext.py"))
	deadline := time.Now().Add(30 * time.Second)
	for !b.prof.interps.Attached(uint32(cmd.Process.Pid)) || len(b.records("compress")) < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("within 30 s: attached %v, %d records", b.prof.interps.Attached(uint32(cmd.Process.Pid)), len(b.records("compress")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(6 * time.Second)
	stopPython(t, cmd)
	time.Sleep(2 * cfg.ReportInterval)
	b.stop(t)
	stopped = true
	want := []pyFrame{{"compress_block", 7}, {"outer", 13}, {"<module>", 27}}
	var linked, right int64
	var bad []string
	for _, s := range b.samples(cmd.Process.Pid) {
		if s.SpanID == "" || s.SampleType != onCPUType {
			continue
		}
		py := pythonFrames(s)
		if len(py) == 0 {
			continue // taken before the process was attached
		}
		linked += s.Count
		if slices.Equal(py, want) && s.Labels[conventions.ProbeID] == "compress" {
			right += s.Count
		} else if len(bad) < 3 {
			bad = append(bad, shortChain(s.UserNames()))
		}
	}
	t.Logf("%d samples linked to zlib_compress's scopes with Python frames, %d called from %v", linked, right, want)
	if linked < 20 || float64(right) < 0.95*float64(linked) {
		t.Errorf("%d of %d linked samples hold the Python callers; some that do not: %v", right, linked, bad)
	}
}

// TestPythonOtherMountNamespace runs CPython 3.12 in a mount namespace of
// its own, where its installation is mounted at a path that does not
// exist outside (and hidden where it was): bpfcol opens its libpython
// through the process, and its samples hold crunch.py's chains.
func TestPythonOtherMountNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	unshare := testenv.LookPath(t, "unshare")
	py := testworkload.PyenvPython(t, 12)
	install := filepath.Dir(filepath.Dir(py.Path))
	dir := t.TempDir()
	script := filepath.Join(dir, "crunch.py")
	if err := os.WriteFile(script, mustRead(t, testworkload.PythonScript(t, "crunch.py")), 0o644); err != nil {
		t.Fatal(err)
	}
	// Inside: the installation at ns/py under a tmpfs of the namespace's
	// own, the original path hidden under another.
	ns := filepath.Join(dir, "ns")
	if err := os.Mkdir(ns, 0o755); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(ns, "py")
	shell := fmt.Sprintf(`set -e; mount -t tmpfs none %[5]s; mkdir %[1]s; mount --bind %[2]s %[1]s; mount -t tmpfs none %[2]s
exec env LD_LIBRARY_PATH=%[1]s/lib PYTHONHOME=%[1]s %[1]s/bin/python3.12 %[3]s %[4]s`,
		inside, install, script, filepath.Join(dir, "truth.txt"), ns)
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", shell)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	w := &crunchWorkload{py: py, cmd: cmd, script: script, truth: filepath.Join(dir, "truth.txt")}
	run := startPythonRun(t)
	run.waitAttached(cmd)
	if maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid)); err != nil || !strings.Contains(string(maps), inside+"/lib/libpython3.12") {
		t.Fatalf("the process does not map libpython under %s (%v)", inside, err)
	}
	if _, err := os.Stat(inside); err == nil {
		t.Fatalf("%s exists outside the namespace: the test proves nothing", inside)
	}
	run.runFor(2*time.Second, 60*time.Second, cmd)
	stopCrunch(t, w)
	run.stop()
	checkCrunch(t, run, w)
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// scriptLine returns the number of the line of script holding text.
func scriptLine(t *testing.T, script, text string) int64 {
	t.Helper()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(src), "\n") {
		if strings.Contains(line, text) {
			return int64(i + 1)
		}
	}
	t.Fatalf("%s has no line %q", script, text)
	return 0
}
