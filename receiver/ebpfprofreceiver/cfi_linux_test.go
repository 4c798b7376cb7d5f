package ebpfprofreceiver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// rootFunctions are the outermost user frames of a complete stack.
var rootFunctions = map[string]bool{
	"_start": true, "__libc_start_call_main": true, "__libc_start_main": true, "__libc_start_main_impl": true,
	"start_thread": true, "clone3": true, "__clone3": true, "__GI___clone3": true, "clone": true, "__clone": true, "runtime.goexit": true,
}

// gatedSink keeps every profile for the sanity checks, and apart those
// whose interval started after from was set, for the measurement.
type gatedSink struct {
	mu       sync.Mutex
	from     atomic.Int64 // unix nanos; 0: measure nothing yet
	all      []pprofile.Profiles
	measured []pprofile.Profiles
}

// intervalStart is when the samples of p started to be gathered.
func intervalStart(p pprofile.Profiles) int64 {
	for i := 0; i < p.ResourceProfiles().Len(); i++ {
		sps := p.ResourceProfiles().At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			if ps := sps.At(j).Profiles(); ps.Len() > 0 {
				return int64(ps.At(0).Time())
			}
		}
	}
	return 0
}

func (s *gatedSink) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (s *gatedSink) ConsumeProfiles(_ context.Context, p pprofile.Profiles) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, p)
	if from := s.from.Load(); from != 0 && intervalStart(p) >= from {
		s.measured = append(s.measured, p)
	}
	return nil
}

// cfiRun is one receiver run over workloads started before it.
type cfiRun struct {
	sink     gatedSink
	counters profiler.Counters
}

// profileWithCFI starts the receiver over the already running processes,
// waits until their unwind tables are in BPF (sampling before that uses
// frame pointers, which is what the fallback is for, not what is measured
// here), then measures for d. The impossible-frame check runs over every
// profile, warm-up included.
func profileWithCFI(t *testing.T, d time.Duration, cmds ...*exec.Cmd) *cfiRun {
	t.Helper()
	return profileWithCFIDuring(t, d, nil, cmds...)
}

// profileWithCFIDuring is profileWithCFI calling measuring, if not nil,
// when the measured interval starts.
func profileWithCFIDuring(t *testing.T, d time.Duration, measuring func(), cmds ...*exec.Cmd) *cfiRun {
	t.Helper()
	return profileWithCFIWhen(t, d, nil, measuring, cmds...)
}

// profileWithCFIWhen also waits, before measuring, for ready (if not nil)
// to hold.
func profileWithCFIWhen(t *testing.T, d time.Duration, ready func(*profilesReceiver) bool, measuring func(), cmds ...*exec.Cmd) *cfiRun {
	t.Helper()
	testenv.RequireBPF(t)
	run := &cfiRun{}
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	// The CFI tests check machine frames against perf's. V8's frames
	// stand in for the native frames they are (JIT code, the
	// interpreter's trampolines), which perf has only as addresses; they
	// are checked on their own (node_linux_test.go). CPython's frames go
	// between native ones and are left out of the comparison.
	cfg.Interpreters = []string{"cpython"}
	r, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, &run.sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			run.counters, _ = r.sampler.Counters()
			t.Logf("tables at the end: %+v", r.unwind.Stats())
			if err := r.Shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		}
	}
	defer stop()
	start := time.Now()
	for _, cmd := range cmds {
		for !r.unwind.Ready(uint32(cmd.Process.Pid)) {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("unwind tables of pid %d not loaded after 30s: %+v", cmd.Process.Pid, r.unwind.Stats())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for ready != nil && !ready(r) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("not ready after 30s: %+v", r.unwind.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("tables loaded %v after start: %+v", time.Since(start).Round(time.Millisecond), r.unwind.Stats())
	// Only intervals that start after this hold no sample from before:
	// the margin covers samples taken before and drained after (the drain
	// runs every 500 ms).
	run.sink.from.Store(time.Now().Add(500 * time.Millisecond).UnixNano())
	time.Sleep(500 * time.Millisecond)
	if measuring != nil {
		measuring()
	}
	time.Sleep(d + cfg.ReportInterval)
	stop()
	t.Logf("unwind stops: %s", stopsString(run.counters))
	checkNoImpossibleFrames(t, run.sink.all)
	return run
}

func stopsString(c profiler.Counters) string {
	var parts []string
	for i, n := range c.UnwindStops {
		parts = append(parts, profiler.StopReason(i).String()+"="+itoa(n))
	}
	return strings.Join(parts, " ")
}

func itoa(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// samplesOf returns the measured samples of pid.
func (r *cfiRun) samplesOf(pid int) []pprofiletest.Sample {
	var out []pprofiletest.Sample
	for _, p := range r.sink.measured {
		for _, s := range pprofiletest.Samples(p) {
			if s.PID == int64(pid) {
				out = append(out, s)
			}
		}
	}
	return out
}

// checkNoImpossibleFrames asserts that no user location of any profile has
// a zero or non-canonical address, or no mapping.
func checkNoImpossibleFrames(t *testing.T, profiles []pprofile.Profiles) {
	t.Helper()
	var locs, bad int
	for _, p := range profiles {
		d := p.Dictionary()
		for i := 1; i < d.LocationTable().Len(); i++ {
			loc := d.LocationTable().At(i)
			var kernel, interpreted, v8 bool
			for _, ai := range loc.AttributeIndices().AsRaw() {
				a := d.AttributeTable().At(int(ai))
				if d.StringTable().At(int(a.KeyStrindex())) == "profile.frame.type" {
					kernel = a.Value().Str() == "kernel" || a.Value().Str() == "bpf"
					v8 = a.Value().Str() == "v8js"
					interpreted = a.Value().Str() == "cpython" || v8
				}
			}
			if kernel {
				continue
			}
			locs++
			mi := loc.MappingIndex()
			ok := loc.Address() != 0 && loc.Address() <= process.MaxUserAddr && mi > 0 && int(mi) < d.MappingTable().Len()
			if ok {
				m := d.MappingTable().At(int(mi))
				ok = m.MemoryLimit() > m.MemoryStart()
			}
			// An interpreted frame runs no code of its own: no address,
			// no mapping, one named line; a V8 frame one per function
			// inlined there.
			if interpreted {
				ok = loc.Address() == 0 && mi == 0 && (loc.Lines().Len() == 1 || v8 && loc.Lines().Len() > 1)
			}
			if !ok {
				bad++
				if bad <= 5 {
					t.Errorf("impossible user location: address %#x, mapping index %d", loc.Address(), mi)
				}
			}
		}
	}
	t.Logf("%d user locations checked, %d impossible", locs, bad)
}

// checkChain asserts that at least minRatio of the workload's samples that
// hold a function of chain (leaf first) hold the rest of it in order, each
// name found after the previous one so that library frames may sit between,
// and end at a process root: all of chain when they hold its leaf, else
// chain from their first function in it on (a sample in qsort's
// internals, with no callback on the stack, still has sort_loop and main
// above it; one in a libc function the leaf called still has the whole
// chain). A sample with none of chain's functions cannot be checked: at
// most maxUncheckedShare of the workload's samples may be such, and their
// share is reported.
func checkChain(t *testing.T, samples []pprofiletest.Sample, chain []string, minRatio float64) {
	t.Helper()
	var all, leafSamples, checked, full, unchecked int64
	var bad, none []string
	for _, s := range samples {
		names := s.UserNames()
		all += s.Count
		i := slices.IndexFunc(names, func(n string) bool { return slices.Contains(chain, n) })
		if i < 0 {
			unchecked += s.Count
			if len(none) < 3 {
				none = append(none, "["+joinNames(names)+"] kernel ["+joinNames(s.KernelNames())+"]")
			}
			continue
		}
		want := chain
		if names[i] == chain[0] {
			leafSamples += s.Count
		} else {
			want = chain[slices.Index(chain, names[i]):]
			// A repeated function (recursion): from its last place.
			for k := len(chain) - 1; k >= 0; k-- {
				if chain[k] == names[i] {
					want = chain[k:]
					break
				}
			}
		}
		checked += s.Count
		if holdsInOrder(names[i:], want) && rootFunctions[names[len(names)-1]] {
			full += s.Count
		} else if len(bad) < 5 {
			bad = append(bad, "["+joinNames(names)+"]")
		}
	}
	if leafSamples < 50 {
		var some []string
		for _, s := range samples[:min(len(samples), 3)] {
			some = append(some, "["+joinNames(s.UserNames())+"]")
		}
		t.Fatalf("only %d samples hold %s (of %d stacks of the workload, such as %v)", leafSamples, chain[0], len(samples), some)
	}
	ratio := float64(full) / float64(checked)
	t.Logf("%d of %d samples (%d with %s on the stack) carry %v, or its part from their first function in it, to the root (%.2f%%); %d of %d (%.2f%%) hold none of it, unchecked",
		full, checked, leafSamples, chain[0], chain, 100*ratio, unchecked, all, pct(unchecked, all))
	if ratio < minRatio {
		t.Errorf("only %.2f%% of the samples carry the chain to the root; some that don't: %v", 100*ratio, bad)
	}
	if float64(unchecked) > maxUncheckedShare*float64(all) {
		t.Errorf("%.2f%% of the samples hold no function of %v, more than the %.0f%% a chain check may leave unchecked; some: %v",
			pct(unchecked, all), chain, 100*maxUncheckedShare, none)
	}
}

// maxUncheckedShare bounds the share of a workload's samples that
// checkChain cannot check, holding none of the chain's functions: a walk
// that stopped inside a library would otherwise go unnoticed.
const maxUncheckedShare = 0.02

// maxInlinedAtLeaf is how many inlined functions may sit before the leaf
// function's own name (Rust's wrapping arithmetic, for example).
const maxInlinedAtLeaf = 2

// holdsInOrder reports whether names starts with chain[0] and holds the
// rest of chain in order.
func holdsInOrder(names, chain []string) bool {
	if len(names) == 0 || names[0] != chain[0] {
		return false
	}
	i := 1
	for _, n := range names[1:] {
		if i < len(chain) && n == chain[i] {
			i++
		}
	}
	return i == len(chain)
}

func startWorkload(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := testworkload.Start(t, bin, args...)
	return cmd
}

// noFramePointers are the flags of the workloads built without frame
// pointers.
var noFramePointers = []string{"-O2", "-g", "-fomit-frame-pointer"}

func TestCFIDeepChainC(t *testing.T) {
	bin := testworkload.BuildC(t, "deepchain.c", noFramePointers...)
	cmd := startWorkload(t, bin)
	run := profileWithCFI(t, 5*time.Second, cmd)
	chain := []string{"hot", "c6", "c5", "c4", "c3", "c2", "c1", "main"}
	samples := run.samplesOf(cmd.Process.Pid)
	checkChain(t, samples, chain, 0.99)
	// Exact: nothing but libc's start code between main and the root.
	for _, s := range samples {
		if names := s.UserNames(); len(names) > 0 && names[0] == "hot" && !slices.Equal(names[:min(len(names), len(chain))], chain) {
			t.Fatalf("a frame between the chain's functions: %v", names)
		}
	}
}

func TestCFIQsortCallback(t *testing.T) {
	bin := testworkload.BuildC(t, "qsortcb.c", noFramePointers...)
	cmd := startWorkload(t, bin)
	run := profileWithCFI(t, 5*time.Second, cmd)
	checkChain(t, run.samplesOf(cmd.Process.Pid), []string{"cmp", "sort_loop", "main"}, 0.99)
}

func TestCFISignalHandler(t *testing.T) {
	bin := testworkload.BuildC(t, "sigburn.c", noFramePointers...)
	cmd := startWorkload(t, bin)
	run := profileWithCFI(t, 5*time.Second, cmd)
	checkChain(t, run.samplesOf(cmd.Process.Pid), []string{"burn", "__restore_rt", "trigger", "outer", "main"}, 0.99)
}

func TestCFICXXExceptionsTemplates(t *testing.T) {
	bin := testworkload.BuildCXX(t, "cxxchain.cc", noFramePointers...)
	cmd := startWorkload(t, bin)
	run := profileWithCFI(t, 5*time.Second, cmd)
	checkChain(t, run.samplesOf(cmd.Process.Pid), []string{
		"hot(unsigned long)", "Level<0>::run(unsigned long)", "Level<1>::run(unsigned long)",
		"Level<2>::run(unsigned long)", "Level<3>::run(unsigned long)", "guarded(unsigned long)", "main",
	}, 0.99)
}

func TestCFIRustRelease(t *testing.T) {
	bin := testworkload.BuildRust(t, "rustchain.rs", "-C", "opt-level=3", "-g")
	cmd := startWorkload(t, bin)
	run := profileWithCFI(t, 5*time.Second, cmd)
	checkChain(t, run.samplesOf(cmd.Process.Pid), []string{
		"rustchain::hot", "rustchain::level3", "rustchain::level2", "rustchain::level1", "rustchain::main", "main",
	}, 0.99)
}

// TestJITFramesNamedNode profiles Node with --perf-basic-prof: its JIT
// frames (anonymous executable memory, walked by frame pointers) are named
// from /tmp/perf-PID.map, and the stacks through them reach the root
// through node's own CFI.
func TestJITFramesNamedNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	cmd := exec.Command(node, "--perf-basic-prof", "-e", `
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
function spin() { for (;;) { globalThis.sink = fib(24); } }
spin();
`)
	cmd.Dir = t.TempDir() // V8 writes its isolate log there
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid)) })
	// Until V8 has compiled fib and written it into its perf map.
	perfMap := fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(perfMap); err == nil && bytes.Contains(b, []byte("fib")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fib in %s after 15 s", perfMap)
		}
	}
	run := profileWithCFI(t, 5*time.Second, cmd)
	// node's main tail-calls node::Start, so either may be on the stack.
	reachesMain := func(names []string) bool {
		return completeStack(names) && (slices.Contains(names, "main") || slices.Contains(names, "node::Start(int, char**)"))
	}
	var total, named, complete int64
	for _, s := range run.samplesOf(cmd.Process.Pid) {
		names := s.UserNames()
		total += s.Count
		if !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "fib") }) {
			continue
		}
		named += s.Count
		if reachesMain(names) {
			complete += s.Count
		}
	}
	t.Logf("node: %d samples, %d with a JS frame named fib, %d of those complete to node's main (%.1f%%)",
		total, named, complete, pct(complete, named))
	// The program runs fib and nothing else: all but the samples of its
	// start-up name it (750 of 752 measured).
	if named*100 < total*95 || named < 50 {
		t.Fatalf("only %d of %d samples have a JS frame named fib; some: %v", named, total, incompleteExamples(run.samplesOf(cmd.Process.Pid)))
	}
	if pct(complete, named) < 95 {
		var some []string
		for _, s := range run.samplesOf(cmd.Process.Pid) {
			if names := s.UserNames(); !reachesMain(names) && len(some) < 3 {
				some = append(some, "["+joinNames(names)+"]")
			}
		}
		t.Fatalf("%.1f%% of the samples in fib are complete to main; some that are not: %v", pct(complete, named), some)
	}
}

// TestSamplesRightAfterDlopenKeepTheirStack starts a process under the
// receiver that loads a library 0.3 s after start and then runs in it: its
// first sample read the process's mappings, without the library. The
// samples in the library must make the mappings be read again at once,
// not a second after the first read: until then each of them would lose
// its whole user stack (a runtime maps its JIT code just so, right after
// start).
func TestSamplesRightAfterDlopenKeepTheirStack(t *testing.T) {
	testenv.RequireBPF(t)
	lib := testworkload.BuildC(t, "dlopenlib.c", append([]string{"-shared", "-fPIC"}, noFramePointers...)...)
	bin := testworkload.BuildC(t, "dlopenhot.c", noFramePointers...)
	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = 500 * time.Millisecond
	r := startProfilesReceiver(t, cfg, sink)
	cmd := startWorkload(t, bin, lib, "0.3")
	var total, empty, inLib int64
	count := func() {
		total, empty, inLib = 0, 0, 0
		for _, p := range sink.AllProfiles() {
			for _, s := range pprofiletest.Samples(p) {
				if s.PID != int64(cmd.Process.Pid) || s.SampleType != "samples/count" {
					continue
				}
				total += s.Count
				switch {
				case len(s.Types) == 0:
					empty += s.Count
				case slices.Contains(s.UserNames(), "lib_hot"):
					inLib += s.Count
				}
			}
		}
	}
	// Until the library's first 100 samples are reported (half a second
	// after the dlopen at 199 Hz), or 15 s on a host too busy to run it.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if count(); inLib >= 100 {
			break
		}
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	count()
	t.Logf("%d samples of the workload, %d in the library, %d without any frame", total, inLib, empty)
	if inLib < 50 {
		t.Fatalf("only %d samples in the library: the test proves nothing", inLib)
	}
	if empty > 0 {
		t.Errorf("%d of %d samples have no frame at all: their user stacks were dropped as outside the process's mappings", empty, total)
	}
}

// TestReturnIntoLaterLibraryKeepsTheStack starts a process that loads a
// library 0.3 s after start, which calls back into the program: its
// samples' leaves lie in the program, whose mapping its first read held,
// and their callers in the library, which it did not. The walk reaching a
// return address outside the mappings must have them read again, as a
// leaf outside them does; else every later stack stops at the callback (as
// a process first sampled while ld.so maps its libraries did, for its
// whole life).
func TestReturnIntoLaterLibraryKeepsTheStack(t *testing.T) {
	testenv.RequireBPF(t)
	lib := testworkload.BuildC(t, "dlopenlib.c", append([]string{"-shared", "-fPIC"}, noFramePointers...)...)
	bin := testworkload.BuildC(t, "dlopenhot.c", noFramePointers...)
	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = 500 * time.Millisecond
	r := startProfilesReceiver(t, cfg, sink)
	cmd := startWorkload(t, bin, lib, "0.3", "callback")
	pid := int64(cmd.Process.Pid)
	samples := func() []pprofiletest.Sample {
		var of []pprofiletest.Sample
		for _, p := range sink.AllProfiles() {
			for _, s := range pprofiletest.Samples(p) {
				if s.PID == pid && s.SampleType == "samples/count" {
					of = append(of, s)
				}
			}
		}
		return of
	}
	inCallback := func(of []pprofiletest.Sample) (n int64) {
		for _, s := range of {
			if slices.Contains(s.UserNames(), "main_hot") {
				n += s.Count
			}
		}
		return n
	}
	// Until 200 samples of the callback are reported (a second after the
	// dlopen at 199 Hz), or 15 s on a host too busy to run it.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if inCallback(samples()) >= 200 {
			break
		}
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The samples walked before the read (about 10 ms of them) may stop at
	// the callback. Those of the spin before the dlopen are not this
	// test's: the program was built for it, and its table is built when
	// its first sample asks (a CI run under load cut 13 of them short).
	var afterSpin []pprofiletest.Sample
	for _, s := range samples() {
		if !slices.ContainsFunc(s.UserNames(), func(n string) bool {
			return n == "wait_spin" || n == "now" || strings.Contains(n, "clock_gettime")
		}) {
			afterSpin = append(afterSpin, s)
		}
	}
	checkChain(t, afterSpin, []string{"main_hot", "lib_calls_back", "call_lib", "main"}, 0.97)
}

// TestCFIDlopen loads a library long after the process's tables were
// loaded. The first samples in it fall outside the loaded mappings; that
// alone makes the loader read the process's mappings again (no polling),
// and from then on its frames are walked with its CFI.
func TestCFIDlopen(t *testing.T) {
	lib := testworkload.BuildC(t, "dlopenlib.c", append([]string{"-shared", "-fPIC"}, noFramePointers...)...)
	bin := testworkload.BuildC(t, "dlopenhot.c", noFramePointers...)
	cmd := startWorkload(t, bin, lib, "3")
	pid := cmd.Process.Pid
	run := profileWithCFIWhen(t, 5*time.Second, func(r *profilesReceiver) bool {
		maps, err := process.ReadMappings(pid)
		if err != nil {
			return false
		}
		for _, m := range maps {
			if m.Path == lib && m.Executable() {
				return r.unwind.Covers(uint32(pid), m.Start)
			}
		}
		return false
	}, nil, cmd)
	checkChain(t, run.samplesOf(pid), []string{"lib_hot", "lib_outer", "call_lib", "main"}, 0.99)
}
