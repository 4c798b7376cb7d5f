package ebpfprofreceiver

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// pyFrame is a Python frame: its function and line.
type pyFrame struct {
	name string
	line int64
}

func (f pyFrame) String() string { return fmt.Sprintf("%s:%d", f.name, f.line) }

// crunchChains are the stacks crunch.py's main thread runs, leaf first:
// the hot chain, and the side function its outer function also calls.
var crunchChains = [][]pyFrame{
	{{"crunch_leaf", 6}, {"crunch_middle", 9}, {"crunch_outer", 11}, {"<module>", 49}},
	{{"side_leaf", 15}, {"crunch_outer", 12}, {"<module>", 49}},
}

// pythonRun is a receiver profiling Python workloads.
type pythonRun struct {
	t    testing.TB
	r    *profilesReceiver
	sink *consumertest.ProfilesSink
	// attached is when each pid was seen attached.
	attached map[int]time.Time
	started  time.Time
	stopped  bool
}

// startPythonRun starts a receiver at 199 Hz with the default 5 s reports:
// on a loaded host the first reports name many libpythons' frames from
// their DWARF, and shorter intervals queue up behind them (dropped as
// batch_queue_full). opts change the config or the receiver before it
// starts.
func startPythonRun(t testing.TB, opts ...func(*Config, *profilesReceiver)) *pythonRun {
	t.Helper()
	testenv.RequireBPF(t)
	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	run := &pythonRun{t: t, sink: sink, attached: map[int]time.Time{}, started: time.Now()}
	r, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(cfg, r)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	run.r = r
	t.Cleanup(func() { run.stop() })
	return run
}

// waitAttached waits until each process is attached to the CPython
// client, and notes when: its samples carry Python frames from then on.
func (p *pythonRun) waitAttached(cmds ...*exec.Cmd) {
	p.t.Helper()
	// A loaded host (load 25 on these 2 CPUs) took 8 s.
	deadline := time.Now().Add(30 * time.Second)
	for _, cmd := range cmds {
		pid := cmd.Process.Pid
		// Attached, and the eval loop's unwind table loaded: from then
		// on a sample's native stack reaches the loop.
		for !p.r.interps.Attached(uint32(pid)) || !p.r.unwind.Covers(uint32(pid), p.loop(pid)) {
			if time.Now().After(deadline) {
				p.t.Fatalf("pid %d (%s) not attached, its eval loop's table loaded, within 30 s: %+v", pid, cmd.Path, p.r.interps.Stats())
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.attached[pid] = time.Now()
		p.t.Logf("pid %d (%s) attached %v after the receiver started", pid, cmd.Path, time.Since(p.started).Round(time.Millisecond))
	}
}

// loop returns an address of pid's eval loop, 0 before it is attached.
func (p *pythonRun) loop(pid int) uint64 {
	if loops := p.r.interps.Loops(uint32(pid)); len(loops) > 0 {
		return loops[0].Start
	}
	return 0
}

// stop shuts the receiver down, once.
func (p *pythonRun) stop() []pprofile.Profiles {
	if !p.stopped {
		p.stopped = true
		c, _ := p.r.sampler.Counters()
		if err := p.r.Shutdown(context.Background()); err != nil {
			p.t.Error(err)
		}
		n := &p.r.counts
		var clients map[string]interp.ClientStats
		if p.r.interps != nil {
			clients = p.r.interps.Stats().Clients
		}
		p.t.Logf("samples: %d taken, %d lost to a full ringbuf, %d read, %d exported, dropped: %d queue, %d stacks, %d batches; interpreter walks %v; %+v",
			c.Samples, c.DroppedRingbuf, n.read.Load(), n.exported.Load(), n.droppedQueue.Load(), n.droppedStacks.Load(), n.droppedBatch.Load(),
			c.InterpStops, clients)
	}
	return p.sink.AllProfiles()
}

// threadSamples returns the on-CPU samples of thread tid of process pid
// taken after the process was attached, each weighed by its timestamps
// after that.
func (p *pythonRun) threadSamples(pid, tid int) []pprofiletest.Sample {
	since := uint64(p.attached[pid].UnixNano())
	var out []pprofiletest.Sample
	for _, prof := range p.sink.AllProfiles() {
		for _, s := range pprofiletest.Samples(prof) {
			if s.PID != int64(pid) || s.SampleType != "samples/count" || len(s.ThreadIDs) == 0 || s.ThreadIDs[0] != int64(tid) {
				continue
			}
			var n int64
			for _, ts := range s.Timestamps {
				if ts >= since {
					n++
				}
			}
			if n > 0 {
				s.Count = n
				out = append(out, s)
			}
		}
	}
	return out
}

// pythonFrames returns the sample's CPython frames, leaf first.
func pythonFrames(s pprofiletest.Sample) []pyFrame {
	var out []pyFrame
	for _, f := range s.Frames() {
		if f.Type == conventions.FrameTypeCPython {
			out = append(out, pyFrame{f.Name, f.Line})
		}
	}
	return out
}

func sameChain(a, b []pyFrame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// evalLoop is the frame that runs Python frames.
const evalLoop = "_PyEval_EvalFrameDefault"

// interleaved reports whether every run of CPython frames of s sits right
// leafward of the eval loop (the function of the next location: the
// last of its names, after the functions inlined into it), and every
// CPython frame is script's.
func interleaved(s pprofiletest.Sample, script string) bool {
	frames := s.Frames()
	for i, f := range frames {
		if f.Type != conventions.FrameTypeCPython {
			continue
		}
		if f.File != script {
			return false
		}
		next := i + 1
		if next == len(frames) || frames[next].Type == conventions.FrameTypeCPython {
			continue
		}
		for next+1 < len(frames) && frames[next+1].Location == frames[next].Location {
			next++
		}
		if !strings.HasPrefix(frames[next].Name, evalLoop) {
			return false
		}
	}
	return true
}

// truth reads crunch.py's own samples of its main thread taken after
// since: the share of them in each chain's leaf.
func truth(t *testing.T, path string, since time.Time) (total int, leaves map[pyFrame]int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("reading the workload's own samples: %v", err)
	}
	defer f.Close()
	leaves = map[pyFrame]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		at, err := strconv.ParseFloat(fields[0], 64)
		if err != nil || at < float64(since.UnixNano())/1e9 {
			continue
		}
		name, line, _ := strings.Cut(fields[1], ":")
		n, _ := strconv.ParseInt(line, 10, 64)
		total++
		leaves[pyFrame{name, n}]++
	}
	return total, leaves
}

// crunchWorkload is crunch.py run by one interpreter.
type crunchWorkload struct {
	py     testworkload.Python
	cmd    *exec.Cmd
	truth  string
	script string
}

// startCrunch starts crunch.py: it runs until stopCrunch.
func startCrunch(t *testing.T, py testworkload.Python, script string) *crunchWorkload {
	t.Helper()
	w := &crunchWorkload{py: py, script: script, truth: filepath.Join(t.TempDir(), "truth.txt")}
	w.cmd = testworkload.Start(t, py.Path, script, w.truth)
	return w
}

// stopCrunch stops the workloads, which write their own samples out.
func stopCrunch(t *testing.T, works ...*crunchWorkload) {
	t.Helper()
	for _, w := range works {
		if err := w.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatalf("%s: %v", w.py.Name, err)
		}
	}
	for _, w := range works {
		if err := w.cmd.Wait(); err != nil {
			t.Fatalf("%s: %v", w.py.Name, err)
		}
	}
}

// threadCPU is how long thread tid of pid has run.
func threadCPU(pid, tid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0, err
	}
	// The fields after the command, which may hold spaces: state is
	// the first, utime the 12th and stime the 13th.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short stat of %d/%d", pid, tid)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	// USER_HZ is 100 on Linux.
	return time.Duration(u+st) * 10 * time.Millisecond, nil
}

// runFor waits until the main thread of every process has run for cpu
// since it was attached, for at most limit: a loaded host gives each
// process less of the CPUs than a quiet one.
func (p *pythonRun) runFor(cpu, limit time.Duration, cmds ...*exec.Cmd) {
	p.t.Helper()
	var threads [][2]int
	for _, cmd := range cmds {
		threads = append(threads, [2]int{cmd.Process.Pid, cmd.Process.Pid})
	}
	p.runThreadsFor(cpu, limit, threads...)
}

// runThreadsFor waits until every thread {pid, tid} has run for cpu, for
// at most limit.
func (p *pythonRun) runThreadsFor(cpu, limit time.Duration, threads ...[2]int) {
	p.t.Helper()
	base := map[[2]int]time.Duration{}
	for _, th := range threads {
		base[th], _ = threadCPU(th[0], th[1])
	}
	deadline := time.Now().Add(limit)
	for _, th := range threads {
		for {
			used, err := threadCPU(th[0], th[1])
			if err != nil {
				p.t.Fatalf("thread %d of pid %d: %v", th[1], th[0], err)
			}
			if used-base[th] >= cpu {
				break
			}
			if time.Now().After(deadline) {
				p.t.Logf("thread %d of pid %d ran %v of the %v wanted within %v: a loaded host", th[1], th[0], used-base[th], cpu, limit)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestPythonFramesEveryVersion profiles crunch.py under every installed
// CPython at once, and asks, of each main thread's samples taken once
// bpfcol attached to it: at least 95% hold one of the script's chains
// whole, in order, typed cpython, with the hot lines right, each run of
// Python frames right leafward of the eval loop and the stack complete;
// and the share of samples in the hot leaf within 0.12 of what the
// script's own sampler thread saw through sys._current_frames().
func TestPythonFramesEveryVersion(t *testing.T) {
	pythons := testworkload.Pythons(t)
	run := startPythonRun(t)
	script := testworkload.PythonScript(t, "crunch.py")
	var works []*crunchWorkload
	var cmds []*exec.Cmd
	for _, py := range pythons {
		w := startCrunch(t, py, script)
		works = append(works, w)
		cmds = append(cmds, w.cmd)
	}
	run.waitAttached(cmds...)
	// About 800 samples of each main thread at 199 Hz.
	run.runFor(4*time.Second, 90*time.Second, cmds...)
	stopCrunch(t, works...)
	run.stop()

	for _, w := range works {
		checkCrunch(t, run, w)
	}
	if s := run.r.interps.Stats().Clients["cpython"]; s.Attached < int64(len(works)) {
		t.Errorf("%d processes attached, want %d: %+v", s.Attached, len(works), s)
	}
}

// checkCrunch asks, of the samples of crunch.py's main thread taken since
// it was attached: at least 95% hold one of its chains whole, in order,
// typed cpython, with the hot lines right, each run of Python frames right
// leafward of the eval loop and the stack complete; and the share in the
// hot leaf as the script's own sys._current_frames() sampler saw it.
func checkCrunch(t *testing.T, run *pythonRun, w *crunchWorkload) {
	t.Helper()
	script := w.script
	hot := crunchChains[0][0]
	pid := w.cmd.Process.Pid
	var total, chains, hotLeaf, complete int64
	var bad []string
	for _, s := range run.threadSamples(pid, pid) {
		total += s.Count
		py := pythonFrames(s)
		inChain := false
		for _, c := range crunchChains {
			inChain = inChain || sameChain(py, c)
		}
		switch {
		case inChain && interleaved(s, script) && completeStack(s.UserNames()):
			chains += s.Count
			if py[0] == hot {
				hotLeaf += s.Count
			}
		case len(bad) < 4:
			bad = append(bad, fmt.Sprintf("%v in [%s]", py, shortChain(s.UserNames())))
		}
		if completeStack(s.UserNames()) {
			complete += s.Count
		}
	}
	n, leaves := truth(t, w.truth, run.attached[pid])
	ours, theirs := float64(hotLeaf)/float64(max(total, 1)), float64(leaves[hot])/float64(max(n, 1))
	// Both shares are estimates: four standard errors of their
	// difference, and 2 points for what sampling at different
	// points of the bytecode may add.
	p := (ours + theirs) / 2
	bound := 4*math.Sqrt(p*(1-p)*(1/float64(max(total, 1))+1/float64(max(n, 1)))) + 0.02
	t.Logf("%-14s %4d samples, %5.1f%% in a whole chain, %5.1f%% complete; in %s: bpfcol %.2f, sys._current_frames %.2f of %d (bound %.2f)",
		w.py.Name, total, pct(chains, total), pct(complete, total), hot, ours, theirs, n, bound)
	if total < 50 || n < 50 {
		t.Errorf("%s: too few samples: bpfcol %d, the script's own %d", w.py.Name, total, n)
		return
	}
	if float64(chains) < 0.95*float64(total) {
		t.Errorf("%s: %.1f%% of samples hold a whole chain, want >= 95%%; some that do not: %v", w.py.Name, pct(chains, total), bad)
	}
	if math.Abs(ours-theirs) > bound {
		t.Errorf("%s: %.2f of samples in %s, the script's own sampler %.2f: more than %.2f apart", w.py.Name, ours, hot, theirs, bound)
	}
}
