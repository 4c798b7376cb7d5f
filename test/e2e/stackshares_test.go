package e2e

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
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
)

// profiledWorkload is a workload whose samples the side-by-side benchmark
// reads in each profiler's export.
type profiledWorkload struct {
	name string // in metric names
	pids func() map[int64]bool
	// thread, when set, keeps only the samples of the threads it accepts
	// (the JVM's main thread, node's main thread).
	thread func(pprofiletest.Sample) bool
	// chain are the workload's hot functions, leaf first: a sample names
	// the chain when its frames hold them in this order, other frames
	// between allowed (native frames between interpreted ones).
	chain []string
	// eachFunction reports the share of samples naming each function of
	// the chain too.
	eachFunction bool
}

func pidSet(pids ...int) func() map[int64]bool {
	return func() map[int64]bool {
		set := map[int64]bool{}
		for _, p := range pids {
			set[int64(p)] = true
		}
		return set
	}
}

// mainThread keeps the samples of the thread whose id is the pid.
func mainThread(s pprofiletest.Sample) bool {
	return len(s.ThreadIDs) > 0 && s.ThreadIDs[0] == s.PID
}

// threadNamed keeps the samples of threads named name (their comm).
func threadNamed(name string) func(pprofiletest.Sample) bool {
	return func(s pprofiletest.Sample) bool { return s.Labels[conventions.ThreadName] == name }
}

// stackShares are the figures of one workload in one profiler's export,
// as percentages of its samples.
type stackShares struct {
	samples  int64
	complete float64
	chain    float64
	each     []float64 // per function of the chain, when eachFunction
}

// rootFunctions are the outermost user frames of a complete stack: where
// a process's main thread, its other threads and Go's goroutines and
// system stacks begin (libc's debug file names clone3 by its internal
// alias too).
var rootFunctions = map[string]bool{
	"_start": true, "__libc_start_main": true, "__libc_start_main_impl": true,
	"start_thread": true, "clone3": true, "__clone3": true, "__GI___clone3": true, "clone": true, "__clone": true, "__GI___clone": true,
	"runtime.goexit": true, "runtime.mstart": true, "runtime.rt0_go": true,
}

// shares computes w's figures over samples, whose unnamed native frames
// names has filled in.
func (w profiledWorkload) shares(samples []pprofiletest.Sample) stackShares {
	pids := w.pids()
	var st stackShares
	var complete, chain int64
	each := make([]int64, len(w.chain))
	for _, s := range samples {
		if !pids[s.PID] || (w.thread != nil && !w.thread(s)) {
			continue
		}
		st.samples += s.Count
		if outermost := outermostUser(s); outermost >= 0 && rootFunctions[s.Names[outermost]] {
			complete += s.Count
		}
		next := 0 // the next function of the chain to find, outward
		for _, name := range s.Names {
			if next < len(w.chain) && frameIs(name, w.chain[next]) {
				next++
			}
		}
		if next == len(w.chain) {
			chain += s.Count
		}
		for i, fn := range w.chain {
			for _, name := range s.Names {
				if frameIs(name, fn) {
					each[i] += s.Count
					break
				}
			}
		}
	}
	pct := func(n int64) float64 { return 100 * float64(n) / float64(max(st.samples, 1)) }
	st.complete, st.chain = pct(complete), pct(chain)
	if w.eachFunction {
		for _, n := range each {
			st.each = append(st.each, pct(n))
		}
	}
	return st
}

// outermostUser is the index of the sample's outermost name outside the
// kernel, or -1.
func outermostUser(s pprofiletest.Sample) int {
	for i := len(s.Names) - 1; i >= 0; i-- {
		if s.Types[i] != conventions.FrameTypeKernel && s.Types[i] != conventions.FrameTypeBPF {
			return i
		}
	}
	return -1
}

// frameIs reports whether a frame's name is the function fn: the same
// name, or fn followed by its parameters after a return type or a
// package, as the JVM's frames are named ("long Crunch.crunchLeaf(long)"
// is "Crunch.crunchLeaf").
func frameIs(name, fn string) bool {
	if name == fn {
		return true
	}
	i := strings.Index(name, fn+"(")
	return i == 0 || i > 0 && (name[i-1] == ' ' || name[i-1] == '.')
}

// windowSamples flattens the samples received, each counting only its
// timestamps inside [from, to]: a report's interval says when it was
// sent rather than when its samples were taken (the peer's run late), the
// timestamps of both say when each was taken.
func windowSamples(b *testing.B, s *profilesServer, from, to time.Time) []pprofiletest.Sample {
	b.Helper()
	var out []pprofiletest.Sample
	for _, p := range s.all() {
		for _, smp := range pprofiletest.Samples(p) {
			if smp.SampleType != conventions.SampleTypeSamples+"/"+conventions.UnitCount {
				continue
			}
			if int64(len(smp.Timestamps)) != smp.Count {
				b.Fatalf("a sample of count %d has %d timestamps: the window cannot be cut", smp.Count, len(smp.Timestamps))
			}
			smp.Count = 0
			for _, ts := range smp.Timestamps {
				if t := time.Unix(0, int64(ts)); !t.Before(from) && t.Before(to) {
					smp.Count++
				}
			}
			if smp.Count > 0 {
				out = append(out, smp)
			}
		}
	}
	return out
}

// latestSample is the time of the latest sample received.
func latestSample(s *profilesServer) time.Time {
	var latest uint64
	for _, p := range s.all() {
		for _, smp := range pprofiletest.Samples(p) {
			for _, ts := range smp.Timestamps {
				latest = max(latest, ts)
			}
		}
	}
	return time.Unix(0, int64(latest))
}

// expectedSamples is what a sampler at hz takes of the CPU time the host
// was busy in the window (/proc/stat before and after), less one sample
// period per CPU at each edge and one clock tick per CPU of /proc/stat's
// resolution. It fails b unless the workloads kept the host busy.
func expectedSamples(b *testing.B, hz int, window time.Duration, before, after cpuStat) float64 {
	b.Helper()
	cpus := float64(after.cpus)
	busy := float64(after.busy-before.busy) / clockTicksPerSecond
	if busy < cpus*window.Seconds()/2 {
		b.Fatalf("the host was busy only %.1f CPU-s of the %s window on %d CPUs: the workloads did not run", busy, window, after.cpus)
	}
	return float64(hz)*busy - 2*cpus - cpus*float64(hz)/clockTicksPerSecond
}

// longestGap is the longest time in [from, to] in which no sample was
// taken.
func longestGap(samples []pprofiletest.Sample, from, to time.Time) time.Duration {
	times := []int64{from.UnixNano(), to.UnixNano()}
	for _, s := range samples {
		for _, ts := range s.Timestamps {
			times = append(times, int64(ts))
		}
	}
	slices.Sort(times)
	var gap int64
	for i := 1; i < len(times); i++ {
		if from.UnixNano() <= times[i-1] && times[i] <= to.UnixNano() {
			gap = max(gap, times[i]-times[i-1])
		}
	}
	return time.Duration(gap)
}

func countSamples(samples []pprofiletest.Sample) int64 {
	var n int64
	for _, s := range samples {
		n += s.Count
	}
	return n
}

// nativeNames names the native frames a profiler left unnamed (the OTel
// eBPF profiler leaves them all to the backend) with llvm-symbolizer, a
// tool that shares no code with either, from the frame's mapping file and
// ELF address. The peer names a mapping by its base name only: files are
// found among those the workloads map.
type nativeNames struct {
	symbolizer string
	byBase     map[string]string // base name → path
}

// learnMaps records the files pid maps.
func (n *nativeNames) learnMaps(pid int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return // exited
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) >= 6 && strings.HasPrefix(f[5], "/") {
			if _, ok := n.byBase[filepath.Base(f[5])]; !ok {
				n.byBase[filepath.Base(f[5])] = f[5]
			}
		}
	}
}

func (n *nativeNames) path(file string) string {
	if filepath.IsAbs(file) {
		return file
	}
	return n.byBase[file]
}

type fileAddr struct {
	path string
	addr uint64
}

// fill names every unnamed user frame of samples in place, inlined
// functions expanded, innermost first. A frame llvm-symbolizer cannot name
// that lies in _start (stripped executables do not name it: glibc's
// x86-64 _start is 38 bytes at the ELF entry point) is named _start.
func (n *nativeNames) fill(b *testing.B, samples []pprofiletest.Sample) {
	b.Helper()
	want := map[string]map[uint64]bool{}
	for _, s := range samples {
		for i, name := range s.Names {
			if p := n.path(s.Files[i]); name == "" && p != "" {
				if want[p] == nil {
					want[p] = map[uint64]bool{}
				}
				want[p][s.Addrs[i]] = true
			}
		}
	}
	names := map[fileAddr][]string{}
	for p, addrs := range want {
		n.symbolize(b, p, addrs, names)
		if f, err := elf.Open(p); err == nil {
			for a := range addrs {
				if !isExecutable(f) {
					break
				}
				if len(names[fileAddr{p, a}]) == 0 && a >= f.Entry && a < f.Entry+startSize {
					names[fileAddr{p, a}] = []string{"_start"}
				}
			}
			f.Close()
		}
	}
	for k := range samples {
		s := &samples[k]
		var ns, ts, fs []string
		var as []uint64
		for i, name := range s.Names {
			expanded := []string{name}
			if got := names[fileAddr{n.path(s.Files[i]), s.Addrs[i]}]; name == "" && len(got) > 0 {
				expanded = got
			}
			for _, e := range expanded {
				ns, ts, fs, as = append(ns, e), append(ts, s.Types[i]), append(fs, s.Files[i]), append(as, s.Addrs[i])
			}
		}
		s.Names, s.Types, s.Files, s.Addrs = ns, ts, fs, as
	}
}

// isExecutable reports whether f is a program rather than a library: it
// names an interpreter.
func isExecutable(f *elf.File) bool {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}

// startSize bounds _start past the ELF entry point: glibc's is 38 bytes
// on x86-64, and the next function is aligned past it.
const startSize = 64

// symbolize runs llvm-symbolizer once over addrs of the file at p.
func (n *nativeNames) symbolize(b *testing.B, p string, addrs map[uint64]bool, into map[fileAddr][]string) {
	b.Helper()
	var in bytes.Buffer
	for a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.symbolizer, "--output-style=JSON", "--obj="+p)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("llvm-symbolizer on %s: %v", p, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Address string
			Symbol  []struct{ FunctionName string }
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			b.Fatalf("llvm-symbolizer's answer %q: %v", sc.Text(), err)
		}
		var a uint64
		if _, err := fmt.Sscanf(r.Address, "0x%x", &a); err != nil {
			continue
		}
		for _, sym := range r.Symbol {
			if sym.FunctionName != "" {
				into[fileAddr{p, a}] = append(into[fileAddr{p, a}], sym.FunctionName)
			}
		}
	}
}
