package probesite

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// benchCalls is how many calls the harness times per measurement: enough
// for a stable mean, few enough that single-stepped rows (~30 µs a call)
// finish in about a second.
const benchCalls = 40000

// fastprobe builds the harness.
func fastprobe(t testing.TB) string {
	t.Helper()
	return testworkload.BuildC(t, "fastprobe.c", harnessFlags...)
}

// harnessRun is what the harness printed about one run.
type harnessRun struct {
	nsPerCall  float64
	semaphores [2]uint64
}

// parseHarness finds the harness's result line in out.
func parseHarness(out []byte) (harnessRun, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 7 && f[0] == "calls" && f[2] == "ns_per_call" && f[4] == "semaphore" {
			var r harnessRun
			var err error
			if r.nsPerCall, err = strconv.ParseFloat(f[3], 64); err != nil {
				return r, err
			}
			r.semaphores[0], _ = strconv.ParseUint(f[5], 10, 64)
			r.semaphores[1], _ = strconv.ParseUint(f[6], 10, 64)
			return r, nil
		}
	}
	return harnessRun{}, fmt.Errorf("no result line in harness output:\n%s", out)
}

// runHarness runs the harness on fn and returns what it measured.
func runHarness(t testing.TB, bin, fn string, calls int) harnessRun {
	t.Helper()
	out, err := exec.Command(bin, fn, strconv.Itoa(calls)).CombinedOutput()
	if err != nil {
		t.Fatalf("running %s %s: %v\n%s", bin, fn, err, out)
	}
	r, err := parseHarness(out)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// probeSet is loaded scope programs, or empty ones.
type probeSet struct {
	*scopeprobe.Probes
	empty bool
}

// loadProbes loads scope programs, or empty ones for the kernel floor,
// with settings that never emit a record (min_duration 1h): the benchmark
// measures the probes, not the ringbuf.
func loadProbes(t testing.TB, empty bool) probeSet {
	t.Helper()
	p, err := scopeprobe.New(scopeprobe.Options{
		Settings:      []scopeprobe.Setting{{MinDuration: time.Hour}},
		EmptyPrograms: empty,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return probeSet{p, empty}
}

// measureWith attaches sites with p, runs the harness on fn and detaches.
// It fails unless the probes fired on every call: the scope programs must
// have closed one scope per call of the timed run (their own counters);
// empty programs, which count nothing, must have run hitsPerCall times per
// call of a verification run on the same attachment (see emptyHits).
func measureWith(t testing.TB, p probeSet, bin, fn string, sites []scopeprobe.Site, hitsPerCall int) float64 {
	t.Helper()
	a, err := p.Attach(bin, sites)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if p.empty {
		ns := runHarness(t, bin, fn, benchCalls).nsPerCall
		emptyHits(t, p, bin, fn, hitsPerCall)
		return ns
	}
	before := closedScopes(t, p)
	ns := runHarness(t, bin, fn, benchCalls).nsPerCall
	// The harness calls fn once more than it times, to warm up.
	if got, want := closedScopes(t, p)-before, uint64(benchCalls+1); got != want {
		t.Fatalf("%s: the scope programs closed %d scopes for %d calls", fn, got, want)
	}
	return ns
}

// closedScopes counts the outermost scopes the scope programs closed: with
// min_duration 1h, each is counted as short (or, were it longer, as a
// record).
func closedScopes(t testing.TB, p probeSet) uint64 {
	t.Helper()
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c.Short + c.Records
}

// verifyCalls is the call count of the run that checks empty programs fire.
const verifyCalls = 1000

// emptyHits runs the harness once more, untimed, with the kernel's BPF run
// counts on, and fails unless p's programs ran hitsPerCall times per call.
// Run counts cost two clock reads per program run, which would bias the
// floor the scope programs are compared with: hence a separate run on the
// same attachment rather than counting the timed one.
func emptyHits(t testing.TB, p probeSet, bin, fn string, hitsPerCall int) {
	t.Helper()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatalf("enabling BPF run counts: %v", err)
	}
	defer stats.Close()
	before := runCount(t, p)
	runHarness(t, bin, fn, verifyCalls)
	if got, want := runCount(t, p)-before, uint64(hitsPerCall*(verifyCalls+1)); got != want {
		t.Fatalf("%s: the empty programs ran %d times for %d calls, want %d", fn, got, verifyCalls+1, want)
	}
}

// runCount sums the kernel's run counts of p's programs.
func runCount(t testing.TB, p probeSet) uint64 {
	t.Helper()
	ids, err := p.ProgramIDs()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, id := range ids {
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			t.Fatalf("opening program %d: %v", id, err)
		}
		st, err := prog.Stats()
		prog.Close()
		if err != nil {
			t.Fatalf("reading program %d stats: %v", id, err)
		}
		n += st.RunCount
	}
	return n
}

// instructionSite finds the n-th instruction of fn whose objdump text
// starts with mnemonic and returns its file offset.
func instructionSite(t testing.TB, b *Binary, bin, fn, mnemonic string) uint64 {
	t.Helper()
	f, err := b.Lookup(Spec{Name: fn})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range objdumpFunction(t, bin, f) {
		if strings.HasPrefix(in.text, mnemonic) {
			off, err := b.FileOffset(in.addr)
			if err != nil {
				t.Fatal(err)
			}
			return off
		}
	}
	t.Fatalf("objdump shows no %q in %s", mnemonic, fn)
	return 0
}

// BenchmarkTrapCost measures what one uprobe hit costs on this machine by
// the instruction it replaces, with an empty BPF program: the facts the
// placement rules rest on. Each row is the harness's ns per call with one
// probe minus the same without.
func BenchmarkTrapCost(b *testing.B) {
	testenv.RequireBPF(b)
	bin := fastprobe(b)
	bf := open(b, bin)
	empty := loadProbes(b, true)
	rows := []struct{ name, fn, mnemonic string }{
		{"endbr64", "f_endbr", "endbr64"},
		{"push", "f_push", "push"},
		{"mov", "f_push", "mov"},
		{"lea", "f_lea", "lea"},
		{"nop5", "f_nop5", "nopl"},
		{"nop1", "f_nop_ret", "nop"},
		{"pop", "f_push", "pop"},
		{"ret", "f_push", "ret"},
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			off := instructionSite(b, bf, bin, row.fn, row.mnemonic)
			var base, hit float64
			for i := 0; i < b.N; i++ {
				base += runHarness(b, bin, row.fn, benchCalls).nsPerCall
				hit += measureWith(b, empty, bin, row.fn, []scopeprobe.Site{{Kind: scopeprobe.Entry, Offset: off, Symbol: row.fn}}, 1)
			}
			b.ReportMetric((hit-base)/float64(b.N), "ns/hit")
		})
	}
	b.Run("uretprobe", func(b *testing.B) {
		// A uretprobe on an emulated push: its cost minus the push's own
		// is the return trampoline's.
		off := instructionSite(b, bf, bin, "f_push", "push")
		var base, hit float64
		for i := 0; i < b.N; i++ {
			base += measureWith(b, empty, bin, "f_push", []scopeprobe.Site{{Kind: scopeprobe.Entry, Offset: off, Symbol: "f_push"}}, 1)
			hit += measureWith(b, empty, bin, "f_push", []scopeprobe.Site{{Kind: scopeprobe.ReturnProbe, Offset: off, Symbol: "f_push"}}, 1)
		}
		b.ReportMetric((hit-base)/float64(b.N), "ns/return")
	})
}

// pairSites are the sites of one benchmark row pair.
type pairSites struct{ placed, naive []scopeprobe.Site }

// benchPairs places the scope pair of each harness row as bpfcol does, and
// naively: an entry uprobe on the first instruction and a uretprobe.
func benchPairs(t testing.TB, b *Binary, fn string) pairSites {
	t.Helper()
	var ps pairSites
	naiveFn := fn
	var plan Plan
	var err error
	if fn == "usdt" {
		naiveFn = "usdt_pair"
		plan, err = b.PlanProbe(0, "usdt:bpfcol:begin", "usdt:bpfcol:end")
	} else {
		plan, err = b.PlanProbe(0, fn, ExitReturn)
	}
	if err != nil {
		t.Fatal(err)
	}
	ps.placed = plan.Sites
	f, err := b.Lookup(Spec{Name: naiveFn})
	if err != nil {
		t.Fatal(err)
	}
	start, err := b.FileOffset(f.Start)
	if err != nil {
		t.Fatal(err)
	}
	ps.naive = []scopeprobe.Site{
		{Kind: scopeprobe.Entry, Offset: start, Symbol: naiveFn},
		{Kind: scopeprobe.ReturnProbe, Offset: start, Symbol: naiveFn},
	}
	return ps
}

// bpftraceScript is the equivalent of the scope pair in bpftrace: time
// each call into a histogram, keyed by thread.
func bpftraceScript(bin, fn string) string {
	if fn == "usdt" {
		return fmt.Sprintf("usdt:%[1]s:bpfcol:begin { @s[tid] = nsecs; } "+
			"usdt:%[1]s:bpfcol:end /@s[tid]/ { @d = hist(nsecs - @s[tid]); delete(@s[tid]); }", bin)
	}
	return fmt.Sprintf("uprobe:%[1]s:%[2]s { @s[tid] = nsecs; } "+
		"uretprobe:%[1]s:%[2]s /@s[tid]/ { @d = hist(nsecs - @s[tid]); delete(@s[tid]); }", bin, fn)
}

// runBpftrace runs the harness as bpftrace's child (bpftrace attaches
// before letting it run) and returns the harness's own ns per call.
func runBpftrace(t testing.TB, bpftrace, bin, fn string) float64 {
	t.Helper()
	cmd := exec.Command(bpftrace, "-e", bpftraceScript(bin, fn), "-c", fmt.Sprintf("%s %s %d", bin, fn, benchCalls))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bpftrace: %v\n%s", err, out)
	}
	r, err := parseHarness(out)
	if err != nil {
		t.Fatal(err)
	}
	// Every call, the warm-up included, must be in bpftrace's histogram.
	if got, want := histogramCount(out), uint64(benchCalls+1); got != want {
		t.Fatalf("bpftrace timed %d calls of %s, want %d:\n%s", got, fn, want, out)
	}
	return r.nsPerCall
}

// histogramCount sums the bucket counts of the histograms bpftrace prints
// at exit, lines like "[512, 1K)   39990 |@@@@@@@@|".
func histogramCount(out []byte) uint64 {
	var n uint64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "[") && !strings.HasPrefix(line, "(") {
			continue
		}
		_, rest, ok := strings.Cut(line, ")")
		if !ok {
			_, rest, ok = strings.Cut(line, "]")
		}
		f := strings.Fields(rest)
		if !ok || len(f) < 2 || !strings.HasPrefix(f[1], "|") {
			continue
		}
		c, err := strconv.ParseUint(f[0], 10, 64)
		if err == nil {
			n += c
		}
	}
	return n
}

// BenchmarkProbePairCost reports, per harness function (named by its first
// instruction) and for the USDT pair, the harness's ns per call with:
// no probe; empty programs on the placed sites (the kernel floor for those
// traps); bpfcol's scope pair as placed; the same pair on the naive entry
// and a uretprobe; and bpftrace's uprobe+uretprobe timing script. Ratios:
// placed/floor (goal <= 1.2) and bpftrace/placed (goal >= 5 on endbr64).
func BenchmarkProbePairCost(b *testing.B) {
	testenv.RequireBPF(b)
	bin := fastprobe(b)
	bf := open(b, bin)
	scope := loadProbes(b, false)
	empty := loadProbes(b, true)
	// bpftrace's row is the goal's other side (make deps-bench installs
	// it): without it the benchmark is skipped, or fails under
	// BPFCOL_REQUIRE_BPF=1, instead of reporting half its ratios.
	bpftrace := testenv.LookPath(b, "bpftrace")
	for _, row := range []struct{ name, fn string }{
		{"endbr64", "f_endbr"}, {"push", "f_push"}, {"lea", "f_lea"}, {"nop5", "f_nop5"}, {"usdt", "usdt"},
	} {
		b.Run(row.name, func(b *testing.B) {
			ps := benchPairs(b, bf, row.fn)
			var none, floor, placed, naive, bt float64
			for i := 0; i < b.N; i++ {
				none += runHarness(b, bin, row.fn, benchCalls).nsPerCall
				// Each call passes one entry and one exit site.
				floor += measureWith(b, empty, bin, row.fn, ps.placed, 2)
				placed += measureWith(b, scope, bin, row.fn, ps.placed, 2)
				naive += measureWith(b, scope, bin, row.fn, ps.naive, 2)
				bt += runBpftrace(b, bpftrace, bin, row.fn)
			}
			n := float64(b.N)
			b.ReportMetric(none/n, "none-ns/call")
			b.ReportMetric(floor/n, "floor-ns/call")
			b.ReportMetric(placed/n, "placed-ns/call")
			b.ReportMetric(naive/n, "naive-ns/call")
			b.ReportMetric(placed/floor, "placed/floor")
			b.ReportMetric(naive/placed, "naive/placed")
			b.ReportMetric(bt/n, "bpftrace-ns/call")
			b.ReportMetric(bt/placed, "bpftrace/placed")
		})
	}
}

// hitRows are BenchmarkScopeHitRatio's harness functions on each
// architecture: a single-stepped first instruction, an emulated one, and
// the USDT pair.
var hitRows = map[string][]string{
	"amd64": {"f_endbr", "f_push", "usdt"},
	"arm64": {"f_stp", "f_b", "usdt"},
}

// BenchmarkScopeHitRatio reports what a hit of bpfcol's scope programs
// costs against empty programs on the same placed sites: the harness's ns
// per call with no probe (none), with empty programs (the kernel's floor
// for those traps) and with the scope pair (placed). Under emulation (make
// vmtest) absolute times mean nothing; the ratios do: placed/floor, and
// hit/empty, (placed-none)/(floor-none), the cost of bpfcol's hits in
// units of an empty one's. It runs in the arm64 VM too, with no bpftrace
// there (BenchmarkProbePairCost's other side).
func BenchmarkScopeHitRatio(b *testing.B) {
	testenv.RequireBPF(b)
	bin := fastprobe(b)
	bf := open(b, bin)
	scope := loadProbes(b, false)
	empty := loadProbes(b, true)
	rows, ok := hitRows[runtime.GOARCH]
	if !ok {
		b.Fatalf("no harness functions for %s", runtime.GOARCH)
	}
	for _, fn := range rows {
		b.Run(fn, func(b *testing.B) {
			ps := benchPairs(b, bf, fn)
			var none, floor, placed float64
			for i := 0; i < b.N; i++ {
				none += runHarness(b, bin, fn, benchCalls).nsPerCall
				// Each call passes one entry and one exit site.
				floor += measureWith(b, empty, bin, fn, ps.placed, 2)
				placed += measureWith(b, scope, bin, fn, ps.placed, 2)
			}
			n := float64(b.N)
			b.ReportMetric(none/n, "none-ns/call")
			b.ReportMetric(floor/n, "floor-ns/call")
			b.ReportMetric(placed/n, "placed-ns/call")
			b.ReportMetric(placed/floor, "placed/floor")
			b.ReportMetric((placed-none)/(floor-none), "hit/empty")
		})
	}
}
