package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// sideBySideScenario is one run of bpfcol and the peer over the same
// workloads: the four usual ones, and those start adds.
type sideBySideScenario struct {
	name   string
	warmUp time.Duration
	start  func(b *testing.B) scenarioWorkloads
	// alone leaves the four usual workloads out: start's, one per CPU,
	// take nearly every sample, so the BPF time per sample is that of a
	// sample of their runtime.
	alone bool
}

type scenarioWorkloads struct {
	profiled []profiledWorkload
	// execs, when set, counts the execs the workloads ran so far.
	execs func() int
}

var sideBySideScenarios = []sideBySideScenario{
	{name: "quiet", warmUp: 15 * time.Second, start: func(*testing.B) scenarioWorkloads { return scenarioWorkloads{} }},
	{name: "churn", warmUp: 15 * time.Second, start: startChurn},
	{name: "python", warmUp: 15 * time.Second, start: pythonCrunch(1)},
	// C2 compiles the hot loop within seconds; the warm-up leaves it 25.
	{name: "java", warmUp: 25 * time.Second, start: javaCrunch(1)},
	{name: "node", warmUp: 15 * time.Second, start: nodeCrunch(1)},
	{name: "python-alone", warmUp: 15 * time.Second, start: pythonCrunch(2), alone: true},
	{name: "java-alone", warmUp: 25 * time.Second, start: javaCrunch(2), alone: true},
	{name: "node-alone", warmUp: 15 * time.Second, start: nodeCrunch(2), alone: true},
}

// pythonCrunch, javaCrunch and nodeCrunch start n processes of the
// runtime's crunch program, profiled as one workload.
func pythonCrunch(n int) func(b *testing.B) scenarioWorkloads {
	return func(b *testing.B) scenarioWorkloads {
		py := testworkload.PyenvPython(b, 12).Path
		pids := startN(n, func() int { return testworkload.Start(b, py, testworkload.Source(b, "crunch.py")).Process.Pid })
		return scenarioWorkloads{profiled: []profiledWorkload{{name: "py312", pids: pidSet(pids...),
			chain: []string{"crunch_leaf", "crunch_middle", "crunch_outer"}, eachFunction: true}}}
	}
}

func javaCrunch(n int) func(b *testing.B) scenarioWorkloads {
	return func(b *testing.B) scenarioWorkloads {
		java := testenv.LookPath(b, "java")
		classes := testworkload.BuildJava(b, "Crunch.java")
		pids := startN(n, func() int { return testworkload.Start(b, java, "-cp", classes, "Crunch").Process.Pid })
		// The launcher's first thread waits; the main method runs in
		// a thread of the same name.
		return scenarioWorkloads{profiled: []profiledWorkload{{name: "java", pids: pidSet(pids...), thread: threadNamed("java"),
			chain: []string{"Crunch.crunchLeaf", "Crunch.crunchMiddle", "Crunch.crunchOuter", "Crunch.main"}, eachFunction: true}}}
	}
}

func nodeCrunch(n int) func(b *testing.B) scenarioWorkloads {
	return func(b *testing.B) scenarioWorkloads {
		node := testenv.LookPath(b, "node")
		pids := startN(n, func() int { return testworkload.Start(b, node, testworkload.Source(b, "crunch.js")).Process.Pid })
		return scenarioWorkloads{profiled: []profiledWorkload{{name: "node", pids: pidSet(pids...), thread: mainThread,
			chain: []string{"crunchLeaf", "crunchMiddle", "crunchOuter"}, eachFunction: true}}}
	}
}

func startN(n int, start func() int) []int {
	pids := make([]int, n)
	for i := range pids {
		pids[i] = start()
	}
	return pids
}

// stormLoops is how many loops the exec storm runs side by side.
const stormLoops = 3

// startChurn adds an exec storm, loops running a copy of bin/bpfcol (a
// 40 MB Go binary) as `validate` and /bin/ls, and a loop of short xz
// processes (`xz -6` on 2 MB, about 0.2 s each).
func startChurn(b *testing.B) scenarioWorkloads {
	dir := b.TempDir()
	big := filepath.Join(dir, "bpfcol-copy")
	if err := copyExecutable(collectorBinary(b), big); err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(dir, "validate.yaml")
	writeFile(b, cfg, profilesConfig("127.0.0.1:4317"))
	if out, err := exec.Command(big, "validate", "--config", cfg).CombinedOutput(); err != nil {
		b.Fatalf("the exec storm's command fails: %v\n%s", err, out)
	}
	// A loop shares the CPUs with the busy workloads: one ran 11 execs/s
	// on this 2-CPU host under a load average of 19, three 59/s under 25.
	var storm []*shellLoop
	for range stormLoops {
		storm = append(storm, startShellLoop(b, `"$1" validate --config "$2" >/dev/null 2>&1 && echo; /bin/ls / >/dev/null && echo`, big, cfg))
	}
	short := startShellLoop(b, xzLoop, xzInput(b, 2<<20))
	return scenarioWorkloads{
		profiled: []profiledWorkload{{name: "xz_short", pids: short.pids, chain: []string{"lzma_code"}}},
		execs: func() (n int) {
			for _, l := range storm {
				n += l.count()
			}
			return n
		},
	}
}

// BenchmarkSideBySide runs bin/bpfcol and the OpenTelemetry eBPF profiler
// (BPFCOL_PEER_PROFILER) at the same time over the same workloads, both at
// 20 Hz with 5 s reports, each exporting OTLP to a server of the test.
// After the warm-up it measures a window (BPFCOL_BENCH_SECONDS, 60 s) and
// reports, for each and as the ratio bpfcol/peer: CPU of its process tree
// as a percentage of one core, RSS at the end and high-water, BPF time per
// sample (all its programs, kernel BPF statistics), and for each workload
// the share of its samples whose stack is complete and the share that
// names its hot functions in order. It fails unless both exported the
// samples of the window and samples of every workload.
func BenchmarkSideBySide(b *testing.B) {
	testenv.RequireBPF(b)
	peer := peerProfiler(b)
	symbolizer := testenv.LookPath(b, "llvm-symbolizer")
	for _, sc := range sideBySideScenarios {
		b.Run(sc.name, func(b *testing.B) {
			var workloads []profiledWorkload
			if !sc.alone {
				four := memoryWorkloads(b)
				workloads = []profiledWorkload{
					{name: "c", pids: pidSet(four.c.Process.Pid), chain: []string{"leaf", "middle", "main"}},
					{name: "go", pids: pidSet(four.goHog.Process.Pid), chain: []string{"main.leaf", "main.middle", "main.main"}},
					{name: "py311", pids: pidSet(four.python.Process.Pid), chain: []string{"leaf", "middle"}},
					{name: "xz", pids: four.xz.pids, chain: []string{"lzma_code"}},
				}
			}
			run := sc.start(b)
			workloads = append(workloads, run.profiled...)
			for b.Loop() {
				sideBySide(b, peer, symbolizer, sc.warmUp, workloads, run.execs)
			}
		})
	}
}

// profilerFigures are one profiler's figures over the window.
type profilerFigures struct {
	cpuPct, rssMB, hwmMB float64
	// bpfUsPerSample is the run time of all its BPF programs per sample,
	// samplingUsPerSample that of its sampling (perf_event) programs.
	bpfUsPerSample, samplingUsPerSample float64
	// samplesShare is the samples taken in the window over those
	// expected of the host's busy CPU time.
	samplesShare float64
	shares       []stackShares
}

// sideProfiler is one of the two profilers of a side-by-side run.
type sideProfiler struct {
	name   string
	pid    int
	server *profilesServer
	// at the window's start
	ticks int64
	bpf   bpfRunStats
	profilerFigures
}

func (p *sideProfiler) begin(b *testing.B) {
	p.ticks, p.bpf = treeTicks(b, p.pid), processBPFStats(b, p.pid)
}

func (p *sideProfiler) end(b *testing.B, window time.Duration) {
	st := processBPFStats(b, p.pid)
	if st.samples <= p.bpf.samples {
		b.Fatalf("the BPF statistics of %s's %d programs show no sample over the window", p.name, st.programs)
	}
	p.cpuPct = 100 * float64(treeTicks(b, p.pid)-p.ticks) / clockTicksPerSecond / window.Seconds()
	p.rssMB = float64(procStatusKB(b, p.pid, "VmRSS")) / 1024
	p.hwmMB = float64(procStatusKB(b, p.pid, "VmHWM")) / 1024
	b.Logf("%s at the window's end: VmRSS %.1f MB = anonymous %.1f + file %.1f + shared %.1f", p.name, p.rssMB,
		float64(procStatusKB(b, p.pid, "RssAnon"))/1024, float64(procStatusKB(b, p.pid, "RssFile"))/1024, float64(procStatusKB(b, p.pid, "RssShmem"))/1024)
	samples := float64(st.samples - p.bpf.samples)
	p.bpfUsPerSample = float64(st.runtimeNs-p.bpf.runtimeNs) / samples / 1000
	p.samplingUsPerSample = float64(st.samplingNs-p.bpf.samplingNs) / samples / 1000
}

// readExport computes the stack figures from the samples p took in
// [from, to], once the report after the one holding the window's end has
// arrived. A profiler that stalled would look cheap: each must have
// exported samples taken in every report interval of the window, and
// samples of every workload. The share of the samples expected of the
// host's busy CPU time is a figure: the peer drops the samples of
// processes it has not read yet, bpfcol some of an exec storm's.
func (p *sideProfiler) readExport(b *testing.B, from, to time.Time, expected float64, names *nativeNames, workloads []profiledWorkload) {
	for deadline := to.Add(3*overheadReport + 10*time.Second); latestSample(p.server).Before(to.Add(overheadReport)); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%s exported no sample taken after %s", p.name, to.Add(overheadReport).Format(time.TimeOnly))
		}
	}
	samples := windowSamples(b, p.server, from, to)
	if gap := longestGap(samples, from, to); gap >= overheadReport {
		b.Fatalf("%s exported no sample taken during %s of the window", p.name, gap)
	}
	n := countSamples(samples)
	p.samplesShare = float64(n) / expected
	b.Logf("%s exported %d samples taken in the window, %.1f%% of the %.0f expected", p.name, n, 100*p.samplesShare, expected)
	names.fill(b, samples)
	for _, w := range workloads {
		sh := w.shares(samples)
		if sh.samples == 0 {
			b.Fatalf("%s exported no sample of the workload %s in the window", p.name, w.name)
		}
		p.shares = append(p.shares, sh)
	}
}

func sideBySide(b *testing.B, peerBin, symbolizer string, warm time.Duration, workloads []profiledWorkload, execs func() int) {
	window := benchSeconds(b)
	enableBPFStats(b)
	ours, theirs := &sideProfiler{name: "bpfcol", server: startProfilesServer(b)}, &sideProfiler{name: "peer", server: startProfilesServer(b)}
	cfg := strings.Replace(profilesConfig(ours.server.addr), "sampling_frequency: 99\n    report_interval: 1s",
		fmt.Sprintf("sampling_frequency: %d\n    report_interval: %s", overheadHz, overheadReport), 1)
	// BPFCOL_SIDEBYSIDE_CPUPROFILE names a file that receives, suffixed
	// with the benchmark's name, bpfcol's CPU profile over the window,
	// taken through the pprof extension. Profiling costs CPU itself: the
	// run's CPU figures are then no measure.
	cpuFile := os.Getenv("BPFCOL_SIDEBYSIDE_CPUPROFILE")
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	if cpuFile != "" {
		cpuFile += "." + strings.ReplaceAll(b.Name(), "/", "_")
		cfg = strings.Replace(cfg, "service:\n", fmt.Sprintf("extensions:\n  pprof:\n    endpoint: %s\nservice:\n  extensions: [pprof]\n", pprofAddr), 1)
	}
	col := startCollector(b, cfg)
	peer := startPeer(b, peerBin, theirs.server.addr, overheadHz, overheadReport)
	started := time.Now()
	ours.pid, theirs.pid = col.cmd.Process.Pid, peer.cmd.Process.Pid
	both := []*sideProfiler{ours, theirs}
	for _, p := range both {
		for len(p.server.all()) == 0 {
			if time.Since(started) > 90*time.Second {
				b.Fatalf("%s exported nothing within 90s:\nbpfcol:\n%s\npeer:\n%s", p.name, col.output, peer.output)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	time.Sleep(time.Until(started.Add(warm)))

	execsFrom := 0
	if execs != nil {
		execsFrom = execs()
	}
	for _, p := range both {
		p.begin(b)
	}
	from, hostBefore := time.Now(), readCPUStat(b)
	if cpuFile != "" {
		fetchProfile(b, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, int(window.Seconds())), cpuFile)
		b.Logf("bpfcol's CPU profile over the window is in %s; this run's CPU figures include the profiling", cpuFile)
	}
	time.Sleep(time.Until(from.Add(window)))
	to, hostAfter := time.Now(), readCPUStat(b)
	for _, p := range both {
		p.end(b, to.Sub(from))
	}
	execsIn := 0
	if execs != nil {
		execsIn = execs() - execsFrom
	}

	expected := expectedSamples(b, overheadHz, to.Sub(from), hostBefore, hostAfter)
	names := &nativeNames{symbolizer: symbolizer, byBase: map[string]string{}}
	for _, w := range workloads {
		for pid := range w.pids() {
			names.learnMaps(pid)
		}
	}
	for _, p := range both {
		p.readExport(b, from, to, expected, names, workloads)
	}
	reportSideBySide(b, &ours.profilerFigures, &theirs.profilerFigures, workloads, to.Sub(from), execsIn)
}

// reportSideBySide reports each figure for bpfcol and the peer and their
// ratio, and logs them as a table.
func reportSideBySide(b *testing.B, ours, theirs *profilerFigures, workloads []profiledWorkload, window time.Duration, execs int) {
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tbpfcol\tpeer\tbpfcol/peer\t")
	row := func(figure string, o, t float64) {
		b.ReportMetric(o, "bpfcol_"+figure)
		b.ReportMetric(t, "peer_"+figure)
		ratio := "-"
		if t != 0 {
			b.ReportMetric(o/t, "ratio_"+figure)
			ratio = fmt.Sprintf("%.2f", o/t)
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%s\t\n", figure, o, t, ratio)
	}
	row("%core", ours.cpuPct, theirs.cpuPct)
	row("rss_MB", ours.rssMB, theirs.rssMB)
	row("hwm_MB", ours.hwmMB, theirs.hwmMB)
	row("bpf_us/sample", ours.bpfUsPerSample, theirs.bpfUsPerSample)
	row("bpf_sampling_us/sample", ours.samplingUsPerSample, theirs.samplingUsPerSample)
	row("samples/expected", ours.samplesShare, theirs.samplesShare)
	for i, w := range workloads {
		o, t := ours.shares[i], theirs.shares[i]
		fmt.Fprintf(tw, "%s samples\t%d\t%d\t\t\n", w.name, o.samples, t.samples)
		row(w.name+"_complete_%", o.complete, t.complete)
		row(w.name+"_chain_%", o.chain, t.chain)
		for j, fn := range w.chain[:len(o.each)] {
			row(w.name+"_"+fn+"_%", o.each[j], t.each[j])
		}
	}
	if execs > 0 {
		b.ReportMetric(float64(execs), "execs_in_window")
		b.ReportMetric(float64(execs)/window.Seconds(), "execs/s")
		fmt.Fprintf(tw, "execs in the window\t%d\t(%.1f/s)\t\t\n", execs, float64(execs)/window.Seconds())
	}
	tw.Flush()
	b.Logf("side by side over %s, load average %.2f; chains (leaf first): %s\n%s", window, loadAverage(), chains(workloads), table.String())
}

func chains(workloads []profiledWorkload) string {
	var parts []string
	for _, w := range workloads {
		parts = append(parts, w.name+"="+strings.Join(w.chain, ";"))
	}
	return strings.Join(parts, " ")
}
