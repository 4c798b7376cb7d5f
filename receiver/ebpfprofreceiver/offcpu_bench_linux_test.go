package ebpfprofreceiver

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// Shape of BenchmarkOffCPUOverhead: wallTriples groups of wall-clock
// rounds, one round per mode (the name is from when a group had three),
// (-short: one cycle of the groups' design, designRows; BPFCOL_OFFCPU_TRIPLES
// overrides both, for a narrower interval) after one warm-up group, and
// statsRounds rounds with kernel BPF statistics on. 30 groups are whole
// cycles of the design for 5 modes (10 rows) and for 6 (6 rows).
const (
	wallTriples = 30
	statsRounds = 5
	// offCPUGoal is the bound on the slowdown at the defaults, in
	// percent.
	offCPUGoal = 3.0
	// ciLevel is the confidence of the reported intervals.
	ciLevel = 0.90
)

var (
	perfTotalTime = regexp.MustCompile(`Total time:\s+([0-9.]+) \[sec\]`)
	perfExecuted  = regexp.MustCompile(`Executed ([0-9]+) pipe operations`)
)

// BenchmarkOffCPUOverhead measures what off-CPU profiling at its defaults
// (probability 0.05, min_duration 1ms) costs a context-switch-heavy
// workload: `perf bench sched pipe`, two tasks ping-ponging over pipes.
//
// It runs on three placements of the pipe's tasks. Free to run on any CPU,
// as `perf bench` does by default ("any-cpu", the case the issue names):
// the scheduler then keeps both on one CPU or puts them on two, round by
// round or within one, and a round trip across CPUs, which wakes a halted
// vCPU twice, costs several times one on a single CPU, so these rounds'
// times measure the placement as much as anything. Both on one CPU
// ("one-cpu"), where no switch waits for an idle CPU to wake up, so a round
// trip is as short as it gets: the worst case for a per-switch cost. Each
// on a CPU of its own ("cross-cpu", the pingpong workload, as perf's pipe
// but pinned): every wake-up crosses CPUs. Each has two parts.
//
// "wall": short wall-clock rounds, one pipe run each under a fresh
// receiver, in groups of one round per mode: off_cpu disabled ("off"),
// enabled ("on"), disabled with an empty tp_btf/sched_switch program
// attached ("empty": the floor any program there costs), disabled with
// perf's context switch counter counting on every CPU, no BPF
// ("switch-counter": the floor any observer of switches costs, which the
// kernel charges perf's own counter too), and enabled at probability
// 1e-12 ("unsampled": the program runs at every switch and follows none).
// With BPFCOL_OFFCPU_HELD=1 a sixth mode, enabled with the receiver's
// drain held back ("held": the BPF side in full, no user space work on
// samples), joins them; it is opt-in because it only splits what "on"
// costs beyond "unsampled" between the sampled share's BPF work and the
// receiver's user space, whose CPU time the counts report in every round
// anyway. A group's order is a row of a Williams design, so that each
// mode takes each place, and follows each other mode, equally often, and
// the machine's drifting load and what a round leaves behind fall on all
// alike; a first group warms up and is dropped. Before each round the
// receiver loads the unwind tables of the pipe's binary from a warm-up
// run (not in held rounds, which load nothing) and waits for its start-up
// work to end. Each group gives ratios, on/off, empty/off, on/empty (the
// cost beyond the hook), switch-counter/off, on/switch-counter (the cost
// beyond any observer), unsampled/off and held/off; their medians are
// reported with a distribution-free 90% confidence interval (order
// statistics of the binomial), and the goal, at most 3% slowdown
// at the defaults, is judged from the on/off interval: met when its upper
// bound is at most 3%, not met when its lower bound is above, inconclusive
// otherwise. Kernel BPF statistics are off there: with them on, every
// program run pays two clock reads, which would be counted as off-CPU's
// cost; rounds where another process had them on are counted and logged.
//
// Every wall round also records counts, which the placement does not
// blur as it does times (roundCounts): the pipe's migrations, CPUs and
// context switches, all CPUs' context switches, the IPIs of all CPUs
// (about 2 per round trip across CPUs, none on one), this process's CPU
// time (the receiver's user space) and the processes it loaded, the other
// CPU use of the machine, and the off-CPU program's sampled switch-outs,
// events and walks. The log has,
// after the slowdowns, the rounds split by placement (by IPIs per round
// trip) with each mode's median time per round trip at equal placement
// ("placement"), the rank correlations of the time per round trip with the
// counts over all rounds ("correlation"), the counts' medians per mode
// ("counts"), and each round's time, IPIs, loads and receiver CPU
// ("rounds").
//
// "bpf": rounds with the statistics on and both the off-CPU program and
// the empty one attached, for the BPF time per context switch: the
// off-CPU program's, the empty one's (mostly the statistics' own clock
// reads, in both), and the difference, the off-CPU program's own work;
// that times the switches of a round, as a share of the round's time.
// Where user stacks are walked in task work (kernel 6.18), the walk's own
// time per kept wait is reported too.
//
// In every round a thread sleeps 2 ms at a time, to give the off-CPU
// program waits to keep (the pipe's are all shorter than min_duration).
// The benchmark fails when the work was not done: the pipe ran other than
// the round trips asked, or its tasks were seen on two CPUs when pinned to
// one or on one when pinned to two, the off-CPU program counted, in a round
// it was on for at the defaults, no short wait (the pipe's) or no event
// (the sleeper's), or at probability 1e-12 followed a switch-out, the
// switch counter counted fewer switches than the round trips' two or the
// pipe's tasks made, or, with the statistics on, either program ran fewer
// times than the round trips' two switches.
func BenchmarkOffCPUOverhead(b *testing.B) {
	testenv.RequireBPF(b)
	perf := testenv.LookPath(b, "perf")
	taskset := testenv.LookPath(b, "taskset")
	// The path /proc/PID/maps names perf's executable by.
	perfExe, err := filepath.EvalSymlinks(perf)
	if err != nil {
		b.Fatalf("resolving %s: %v", perf, err)
	}
	pipe := func(name string, loops int, prefix ...string) offCPUBench {
		run := func(n int) []string {
			return append(slices.Clone(prefix), perf, "bench", "sched", "pipe", "-l", strconv.Itoa(n))
		}
		return offCPUBench{name: name, loops: loops, cmd: run(loops), warm: run(1_000_000_000), exe: perfExe}
	}
	last := strconv.Itoa(runtime.NumCPU() - 1)
	// Rounds of about 0.4 s on a quiet 2-vCPU VM.
	oneCPU := pipe("one-cpu", 80_000, taskset, "-c", last)
	oneCPU.placement = func(pl placement) error {
		if pl.apart > 0 {
			return fmt.Errorf("pinned to one CPU, the pipe's tasks were on two in %d of %d polls", pl.apart, pl.polls)
		}
		return nil
	}
	// The deterministic cross-CPU placement: every round trip wakes a
	// task on the other CPU twice.
	pingpong := testworkload.BuildC(b, "pingpong.c", "-O2")
	crossCPU := offCPUBench{name: "cross-cpu", loops: 10_000,
		cmd: []string{pingpong, "10000", "0", last}, warm: []string{pingpong, "1000000000", "0", last}, exe: pingpong}
	crossCPU.placement = func(pl placement) error {
		if pl.polls == 0 || pl.apart < pl.polls {
			return fmt.Errorf("pinned to two CPUs, the pipe's tasks were apart in %d of %d polls", pl.apart, pl.polls)
		}
		return nil
	}
	cases := []offCPUBench{pipe("any-cpu", 20_000), oneCPU, crossCPU}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.Run("wall", c.wall)
			b.Run("bpf", c.bpf)
		})
	}
}

// offCPUBench is one placement of BenchmarkOffCPUOverhead's pipe: cmd runs
// loops round trips.
type offCPUBench struct {
	name  string
	loops int
	cmd   []string
	// warm is a long run of cmd, stopped before each round once the
	// receiver has loaded exe, its executable.
	warm []string
	exe  string
	// placement, if set, checks where the polls saw the pipe's tasks.
	placement func(placement) error
}

// offCPUMode is what a round runs the pipe under.
type offCPUMode int

const (
	modeOff   offCPUMode = iota // the receiver, off_cpu disabled
	modeOn                      // the receiver, off_cpu enabled at its defaults
	modeEmpty                   // modeOff and the empty program
	// modeOff and perf's context switch counter (switchCounter) enabled
	// for the pipe's run.
	modeSwitchCounter
	// modeOn at probability 1e-12: the program runs at every switch and
	// follows none, so nothing is walked, recorded or read.
	modeUnsampled
	// modeOn with the receiver's ringbuf drain held back from its start
	// to the round's end: the BPF side works in full, the receiver's user
	// space reads nothing, and so loads no process's unwind tables.
	modeHeld
	modeStats // modeOn and the empty program, BPF statistics on
)

// wallModes are the modes a wall-clock group can have, modeOff to
// modeHeld.
const wallModes = 6

var modeNames = [...]string{"off", "on", "empty", "switch-counter", "unsampled", "held", "stats"}

// groupModes are the modes of a wall-clock group: all but modeHeld, which
// BPFCOL_OFFCPU_HELD=1 adds.
func groupModes(b *testing.B) []offCPUMode {
	modes := []offCPUMode{modeOff, modeOn, modeEmpty, modeSwitchCounter, modeUnsampled}
	switch v := os.Getenv("BPFCOL_OFFCPU_HELD"); v {
	case "", "0":
	case "1":
		modes = append(modes, modeHeld)
	default:
		b.Fatalf("BPFCOL_OFFCPU_HELD=%q: not 0 or 1", v)
	}
	return modes
}

func (m offCPUMode) String() string { return modeNames[m] }

// roundResult is what one round measured.
type roundResult struct {
	pipe time.Duration // perf's total time
	// With statistics on: the runs and run time of each program.
	offRuns, emptyRuns uint64
	offRT, emptyRT     time.Duration
	// The off-CPU task work's walks and their time.
	walks  uint64
	walkRT time.Duration
	// Whether the sampling program's runs moved: another process had the
	// statistics on.
	foreignStats bool
	// Whether user stacks are walked in task work (OffCPUTaskWork).
	taskWork bool
	// Whether the receiver was still busy when the round started
	// (waitIdle gave up).
	busyStart bool
	counts    roundCounts
}

// emptySwitchProgram loads a tp_btf/sched_switch program that does
// nothing.
func emptySwitchProgram(b *testing.B) *ebpf.Program {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceRawTp,
		AttachTo:     "sched_switch",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		b.Fatalf("loading an empty sched_switch program: %v", err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// round runs the pipe once under mode, with a thread sleeping 2 ms at a
// time alongside, and fails b if the work was not done.
func (c offCPUBench) round(b *testing.B, empty *ebpf.Program, mode offCPUMode) roundResult {
	offCPU := mode == modeOn || mode == modeUnsampled || mode == modeHeld || mode == modeStats
	withEmpty := mode == modeEmpty || mode == modeStats
	stats := mode == modeStats
	cfg := createDefaultConfig().(*Config)
	cfg.OffCPU.Enabled = offCPU
	if mode == modeUnsampled {
		cfg.OffCPU.Probability = 1e-12
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	r, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	var release chan struct{}
	if mode == modeHeld {
		release = make(chan struct{})
		r.hooks.drainStart = release
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if release != nil {
			close(release)
		}
		if err := r.Shutdown(context.Background()); err != nil {
			b.Error(err)
		}
	}()
	if withEmpty {
		l, err := link.AttachTracing(link.TracingOptions{Program: empty})
		if err != nil {
			b.Fatalf("attaching the empty program: %v", err)
		}
		defer l.Close()
	}
	var counter *switchCounter
	if mode == modeSwitchCounter {
		counter = openSwitchCounter(b)
		defer counter.close()
	}
	// Held, the receiver reads no sample and so loads no process.
	if mode != modeHeld {
		c.warmUp(b, r)
	}
	busyStart := !waitIdle(b)
	if stats {
		s, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			b.Fatalf("enabling BPF run-time statistics: %v", err)
		}
		defer s.Close()
	}
	type snapshot struct {
		emp            ebpf.ProgramStats
		offRT          time.Duration
		offRuns        uint64
		c              profiler.Counters
		walkRT         time.Duration
		walks, sampled uint64
	}
	read := func() (s snapshot) {
		var err error
		if offCPU {
			if s.offRT, s.offRuns, err = r.sampler.OffCPURunStats(); err != nil {
				b.Fatal(err)
			}
			if s.walkRT, s.walks, err = r.sampler.OffCPUWalkStats(); err != nil {
				b.Fatal(err)
			}
			if s.c, err = r.sampler.Counters(); err != nil {
				b.Fatal(err)
			}
		}
		st, err := empty.Stats()
		if err != nil {
			b.Fatal(err)
		}
		s.emp = *st
		// The sampling program's runs are counted only while the
		// statistics are on, by this process or by another.
		if _, s.sampled, err = r.sampler.RunStats(); err != nil {
			b.Fatal(err)
		}
		return s
	}
	s0 := read()
	stop := make(chan struct{})
	slept := make(chan struct{})
	go func() {
		defer close(slept)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ts := unix.NsecToTimespec(int64(2 * time.Millisecond))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
		}
	}()
	loads0 := r.unwind.Stats().Loads
	cpu0, sw0 := selfUsage(b)
	sys0 := readSystemCounts(b)
	var out bytes.Buffer
	cmd := exec.Command(c.cmd[0], c.cmd[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if counter != nil {
		counter.set(b, unix.PERF_EVENT_IOC_ENABLE)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting %s: %v", c.cmd[0], err)
	}
	stopPoll := make(chan struct{})
	polled := make(chan placement)
	go func() { polled <- pollPlacement(cmd.Process.Pid, stopPoll) }()
	err = cmd.Wait()
	if counter != nil {
		counter.set(b, unix.PERF_EVENT_IOC_DISABLE)
	}
	close(stopPoll)
	pl := <-polled
	sys1 := readSystemCounts(b)
	cpu1, sw1 := selfUsage(b)
	loads1 := r.unwind.Stats().Loads
	close(stop)
	<-slept
	if err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(c.cmd, " "), err, out.Bytes())
	}
	s1 := read()
	pipe, err := perfPipeTime(out.Bytes(), c.loops)
	if err != nil {
		b.Fatal(err)
	}
	res := roundResult{
		pipe:         pipe,
		busyStart:    busyStart,
		foreignStats: !stats && s1.sampled != s0.sampled,
		walks:        s1.walks - s0.walks,
		walkRT:       s1.walkRT - s0.walkRT,
	}
	k := &res.counts
	k.pipeCPU, k.pipeVol, k.pipeInvol = usageOf(cmd.ProcessState)
	for _, m := range pl.migrations {
		k.migrations += m
	}
	k.polls, k.apart = pl.polls, pl.apart
	k.selfCPU, k.selfSwitches = cpu1-cpu0, sw1-sw0
	k.busy = time.Duration(sys1.busyTicks-sys0.busyTicks) * 10 * time.Millisecond
	k.foreign = max(k.busy-k.pipeCPU-k.selfCPU, 0)
	k.ipis, k.irqWork = sys1.ipis-sys0.ipis, sys1.irqWork-sys0.irqWork
	k.switches = sys1.switches - sys0.switches
	if counter != nil {
		// Each round trip switches each task out once at least, and
		// every switch the pipe's tasks made was one on some CPU.
		k.counted = counter.count(b)
		if min := max(uint64(2*c.loops), uint64(k.pipeVol+k.pipeInvol)); k.counted < min {
			b.Fatalf("the context switch counter counted %d switches in a round of %d round trips "+
				"whose tasks switched %d times", k.counted, c.loops, k.pipeVol+k.pipeInvol)
		}
	}
	k.walks = res.walks
	k.loads = loads1 - loads0
	d := func(f func(profiler.Counters) uint64) uint64 { return f(s1.c) - f(s0.c) }
	k.events = d(func(c profiler.Counters) uint64 { return c.OffCPUEvents })
	k.sampled = d(func(c profiler.Counters) uint64 {
		return c.OffCPUShort + c.OffCPUEvents + c.OffCPUMerged + c.OffCPUBusy + c.OffCPUFull +
			c.OffCPUTaskWorkRefused + c.OffCPUGone + c.OffCPUUnended
	})
	if c.placement != nil {
		if err := c.placement(pl); err != nil {
			b.Fatal(err)
		}
	}
	if offCPU {
		res.taskWork = r.sampler.OffCPUTaskWork()
		short, events := s1.c.OffCPUShort-s0.c.OffCPUShort, s1.c.OffCPUEvents-s0.c.OffCPUEvents
		if mode == modeUnsampled {
			// Nothing is followed at probability 1e-12.
			if k.sampled != 0 {
				b.Fatalf("the off-CPU program at probability 1e-12 followed %d switch-outs", k.sampled)
			}
		} else if short == 0 || events == 0 {
			// Every sampled switch-out of the pipe is counted short,
			// every one of the sleeper's is kept.
			b.Fatalf("the off-CPU program did not run: %d short waits, %d events", short, events)
		}
	}
	if stats {
		res.offRuns, res.offRT = s1.offRuns-s0.offRuns, s1.offRT-s0.offRT
		res.emptyRuns, res.emptyRT = s1.emp.RunCount-s0.emp.RunCount, s1.emp.Runtime-s0.emp.Runtime
		// A round trip switches each task out and in once at least.
		if min := uint64(2 * c.loops); res.offRuns < min || res.emptyRuns < min {
			b.Fatalf("with statistics on, %d runs of the off-CPU program and %d of the empty one, "+
				"for %d round trips: fewer than 2 switches each", res.offRuns, res.emptyRuns, c.loops)
		}
	}
	return res
}

// perfPipeTime is the total time in the output of `perf bench sched pipe`,
// which must have run loops round trips.
func perfPipeTime(out []byte, loops int) (time.Duration, error) {
	m := perfExecuted.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no round trip count in perf's output:\n%s", out)
	}
	if n, err := strconv.Atoi(string(m[1])); err != nil || n != loops {
		return 0, fmt.Errorf("perf ran %s round trips, not %d:\n%s", m[1], loops, out)
	}
	m = perfTotalTime.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no total time in perf's output:\n%s", out)
	}
	secs, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return 0, fmt.Errorf("perf's total time %q: %w", m[1], err)
	}
	if secs <= 0 {
		return 0, fmt.Errorf("perf's total time %q is not positive", m[1])
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// wall is the wall-clock part of BenchmarkOffCPUOverhead.
func (c offCPUBench) wall(b *testing.B) {
	empty := emptySwitchProgram(b)
	modes := groupModes(b)
	rows := designRows(len(modes))
	triples := wallTriples
	if testing.Short() {
		triples = rows
	}
	if v := os.Getenv("BPFCOL_OFFCPU_TRIPLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 {
			b.Fatalf("BPFCOL_OFFCPU_TRIPLES=%q: not a number of at least 5", v)
		}
		triples = n
	}
	// Fewer groups than whole cycles of the design leave some modes more
	// often first, or after another, than the rest.
	balanced := "balanced"
	if triples%rows != 0 {
		balanced = fmt.Sprintf("NOT balanced: not a multiple of the design's %d rows", rows)
	}
	load0 := loadAverage(b)
	var onOff, emptyOff, onEmpty, counterOff, onCounter, unsampledOff, heldOff []float64
	var offTotal time.Duration
	var rounds [wallModes][]roundResult
	foreign := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Group 0 warms up: its rounds are dropped.
		for t := 0; t <= triples; t++ {
			var d [wallModes]time.Duration
			for _, k := range groupOrder(t, len(modes)) {
				mode := modes[k]
				res := c.round(b, empty, mode)
				d[mode] = res.pipe
				if res.foreignStats {
					foreign++
				}
				if t > 0 {
					rounds[mode] = append(rounds[mode], res)
				}
			}
			if t == 0 {
				continue
			}
			off, on, bare := d[modeOff].Seconds(), d[modeOn].Seconds(), d[modeEmpty].Seconds()
			counted := d[modeSwitchCounter].Seconds()
			onOff = append(onOff, 100*(on/off-1))
			emptyOff = append(emptyOff, 100*(bare/off-1))
			onEmpty = append(onEmpty, 100*(on/bare-1))
			counterOff = append(counterOff, 100*(counted/off-1))
			onCounter = append(onCounter, 100*(on/counted-1))
			unsampledOff = append(unsampledOff, 100*(d[modeUnsampled].Seconds()/off-1))
			if d[modeHeld] > 0 {
				heldOff = append(heldOff, 100*(d[modeHeld].Seconds()/off-1))
			}
			offTotal += d[modeOff]
		}
	}
	b.StopTimer()
	med := func(xs []float64) float64 { m, _, _ := medianCI(xs, ciLevel); return m }
	b.ReportMetric(med(unsampledOff), "%slowdown-unsampled")
	if len(heldOff) > 0 {
		b.ReportMetric(med(heldOff), "%slowdown-held")
	}
	slow, lo, hi := medianCI(onOff, ciLevel)
	eslow, elo, ehi := medianCI(emptyOff, ciLevel)
	beyond, blo, bhi := medianCI(onEmpty, ciLevel)
	cslow, clo, chi := medianCI(counterOff, ciLevel)
	cbeyond, cblo, cbhi := medianCI(onCounter, ciLevel)
	b.ReportMetric(slow, "%slowdown")
	b.ReportMetric(lo, "%slowdown-ci90-lo")
	b.ReportMetric(hi, "%slowdown-ci90-hi")
	b.ReportMetric(eslow, "%slowdown-empty-prog")
	b.ReportMetric(beyond, "%slowdown-beyond-empty")
	b.ReportMetric(cslow, "%slowdown-switch-counter")
	b.ReportMetric(cbeyond, "%slowdown-beyond-switch-counter")
	b.ReportMetric(float64(offTotal.Nanoseconds())/float64(len(onOff)*c.loops), "ns/roundtrip")
	ulo, uhi := ci(unsampledOff)
	held := "not run (BPFCOL_OFFCPU_HELD=1 runs it)"
	if len(heldOff) > 0 {
		hlo, hhi := ci(heldOff)
		held = fmt.Sprintf("%.2f%% (CI %.2f..%.2f)", med(heldOff), hlo, hhi)
	}
	b.Logf("%s: %d groups (%s) of %d round trips; slowdown at the defaults (on/off) median %.2f%%, 90%% CI %.2f..%.2f%%: goal <= %.0f%% %s; "+
		"empty program (empty/off) %.2f%% (CI %.2f..%.2f); beyond the empty program (on/empty) %.2f%% (CI %.2f..%.2f); "+
		"perf's switch counter, no BPF (switch-counter/off) %.2f%% (CI %.2f..%.2f); beyond the counter (on/switch-counter) %.2f%% (CI %.2f..%.2f); "+
		"on at probability 1e-12, nothing followed (unsampled/off) %.2f%% (CI %.2f..%.2f); "+
		"on with the ringbuf drain held (held/off) %s; "+
		"rounds with BPF statistics enabled by another process: %d; load average %s before, %s after; on/off %%: %.2f",
		c.name, len(onOff), balanced, c.loops, slow, lo, hi, offCPUGoal, verdict(lo, hi, offCPUGoal),
		eslow, elo, ehi, beyond, blo, bhi, cslow, clo, chi, cbeyond, cblo, cbhi, med(unsampledOff), ulo, uhi, held,
		foreign, load0, loadAverage(b), onOff)
	c.reportCounts(b, modes, rounds)
}

// ci is the confidence interval of the median of xs.
func ci(xs []float64) (lo, hi float64) {
	_, lo, hi = medianCI(xs, ciLevel)
	return lo, hi
}

// Rounds by the pipe's placement, from the IPIs per round trip: about 2
// when every wake-up crosses CPUs, none when both tasks share one.
const (
	sameCPUMaxIPIs  = 0.2 // fewer per round trip: a one-CPU round
	crossCPUMinIPIs = 1.5 // more: a cross-CPU round; between: mixed
)

// reportCounts logs, per mode, the medians of the rounds' counts, as rates
// (a round's length varies with the placement), the rounds of each
// placement with their medians of time per round trip (modes compared at
// equal placement), and over all rounds the rank correlations of the time
// per round trip with the counts.
func (c offCPUBench) reportCounts(b *testing.B, modes []offCPUMode, rounds [wallModes][]roundResult) {
	loops := float64(c.loops)
	med := func(rs []roundResult, f func(roundResult) float64) float64 {
		if len(rs) == 0 {
			return math.NaN()
		}
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		m, _, _ := medianCI(xs, ciLevel)
		return m
	}
	// Per round trip, per 1000 of them, per second of the round, or as
	// a share of one CPU over the round.
	perTrip := func(n float64) float64 { return n / loops }
	perSec := func(r roundResult, n float64) float64 { return n / r.pipe.Seconds() }
	share := func(r roundResult, d time.Duration) float64 { return 100 * d.Seconds() / r.pipe.Seconds() }
	nsPerTrip := func(r roundResult) float64 { return perTrip(float64(r.pipe.Nanoseconds())) }
	migrations := func(r roundResult) float64 { return 1000 * perTrip(float64(r.counts.migrations)) }
	apart := func(r roundResult) float64 {
		if r.counts.polls == 0 {
			return math.NaN()
		}
		return 100 * float64(r.counts.apart) / float64(r.counts.polls)
	}
	ipis := func(r roundResult) float64 { return perTrip(float64(r.counts.ipis)) }
	invol := func(r roundResult) float64 { return 1000 * perTrip(float64(r.counts.pipeInvol)) }
	vol := func(r roundResult) float64 { return perTrip(float64(r.counts.pipeVol)) }
	pipeCPU := func(r roundResult) float64 { return perTrip(float64(r.counts.pipeCPU.Nanoseconds())) }
	selfCPU := func(r roundResult) float64 { return share(r, r.counts.selfCPU) }
	selfSw := func(r roundResult) float64 { return perSec(r, float64(r.counts.selfSwitches)) }
	loads := func(r roundResult) float64 { return perSec(r, float64(r.counts.loads)) }
	foreign := func(r roundResult) float64 { return share(r, r.counts.foreign) }
	irqWork := func(r roundResult) float64 { return perSec(r, float64(r.counts.irqWork)) }
	sampled := func(r roundResult) float64 { return 1000 * perTrip(float64(r.counts.sampled)) }
	events := func(r roundResult) float64 { return perSec(r, float64(r.counts.events)) }
	walks := func(r roundResult) float64 { return perSec(r, float64(r.counts.walks)) }
	switches := func(r roundResult) float64 { return perTrip(float64(r.counts.switches)) }
	// Only switch-counter rounds count with perf's counter (one that
	// counted none fails): NaN in the others.
	counted := func(r roundResult) float64 {
		if r.counts.counted == 0 {
			return math.NaN()
		}
		return perTrip(float64(r.counts.counted))
	}
	var all []roundResult
	var countLines []string
	var same, mixed, cross [wallModes][]roundResult
	for _, m := range modes {
		rs := rounds[m]
		all = append(all, rs...)
		busy := 0
		for _, r := range rs {
			switch x := ipis(r); {
			case x < sameCPUMaxIPIs:
				same[m] = append(same[m], r)
			case x > crossCPUMinIPIs:
				cross[m] = append(cross[m], r)
			default:
				mixed[m] = append(mixed[m], r)
			}
			if r.busyStart {
				busy++
			}
		}
		countLines = append(countLines, fmt.Sprintf("%s counts %-9s (medians of %d rounds): ns/roundtrip %.0f; pipe: IPIs/trip %.2f, polls apart %.0f%%, "+
			"migrations/1k trips %.2f, involuntary switches/1k trips %.1f, voluntary/trip %.2f, CPU ns/trip %.0f; "+
			"this process: CPU %.1f%%, switches/s %.0f, processes loaded/s %.1f, rounds started busy %d; "+
			"other CPU use %.1f%%; IRQ work/s %.0f; all CPUs' switches/trip %.2f, counted by perf's counter %.2f; "+
			"off-CPU: sampled switch-outs/1k trips %.1f, events/s %.0f, walks/s %.0f",
			c.name, m, len(rs), med(rs, nsPerTrip), med(rs, ipis), med(rs, apart),
			med(rs, migrations), med(rs, invol), med(rs, vol), med(rs, pipeCPU),
			med(rs, selfCPU), med(rs, selfSw), med(rs, loads), busy,
			med(rs, foreign), med(rs, irqWork), med(rs, switches), med(rs, counted),
			med(rs, sampled), med(rs, events), med(rs, walks)))
	}
	var byPlace strings.Builder
	for _, m := range modes {
		fmt.Fprintf(&byPlace, "; %s %d/%d/%d, ns/trip %.0f/%.0f/%.0f", m,
			len(same[m]), len(mixed[m]), len(cross[m]),
			med(same[m], nsPerTrip), med(mixed[m], nsPerTrip), med(cross[m], nsPerTrip))
	}
	ratio := func(place [wallModes][]roundResult, m offCPUMode) float64 {
		return 100 * (med(place[m], nsPerTrip)/med(place[modeOff], nsPerTrip) - 1)
	}
	var equal strings.Builder
	for _, p := range []struct {
		name  string
		place [wallModes][]roundResult
	}{{"one CPU", same}, {"mixed", mixed}, {"cross-CPU", cross}} {
		fmt.Fprintf(&equal, "; %s:", p.name)
		for _, m := range modes {
			if m == modeOff {
				continue
			}
			fmt.Fprintf(&equal, " %s/off %.1f%%", m, ratio(p.place, m))
		}
	}
	b.Logf("%s placement (IPIs/trip < %.1f one CPU, > %.1f cross-CPU, else mixed): rounds one/mixed/cross and their "+
		"median ns/trip per mode%s; medians at equal placement%s",
		c.name, sameCPUMaxIPIs, crossCPUMinIPIs, byPlace.String(), equal.String())
	series := func(f func(roundResult) float64) []float64 {
		xs := make([]float64, len(all))
		for i, r := range all {
			xs[i] = f(r)
		}
		return xs
	}
	t := series(nsPerTrip)
	b.Logf("%s correlation (Spearman, %d rounds of all modes) of ns/roundtrip with: IPIs/trip %.2f, polls apart %.2f, "+
		"migrations/trip %.2f, involuntary switches/trip %.2f, pipe CPU/trip %.2f, this process's CPU %.2f, "+
		"processes loaded/s %.2f, other CPU use %.2f",
		c.name, len(all), spearman(t, series(ipis)), spearman(t, series(apart)), spearman(t, series(migrations)),
		spearman(t, series(invol)), spearman(t, series(pipeCPU)), spearman(t, series(selfCPU)),
		spearman(t, series(loads)), spearman(t, series(foreign)))
	// The testing package keeps 10 lines of a benchmark's log: with
	// wall's, these are 9 (10 with modeHeld).
	for _, l := range countLines {
		b.Log(l)
	}
	// Each round: ns/trip, IPIs/trip, processes loaded and this
	// process's CPU time in ms.
	var line strings.Builder
	for _, m := range modes {
		fmt.Fprintf(&line, "; %s", m)
		for _, r := range rounds[m] {
			fmt.Fprintf(&line, " %.0f/%.2f/%d/%.0f", nsPerTrip(r), ipis(r), r.counts.loads,
				float64(r.counts.selfCPU.Microseconds())/1000)
		}
	}
	b.Logf("%s rounds (ns/trip/IPIs per trip/processes loaded/this process's CPU ms)%s", c.name, line.String())
}

// groupOrder is the order of the n modes in group t: the rows of a Williams
// design, in turn, so that over every 2n groups (n for an even n) each mode
// takes each place equally often and follows each other mode equally often:
// what a round leaves behind (its receiver's teardown, its garbage) falls
// on every mode alike.
func groupOrder(t, n int) []int {
	rows := designRows(n)
	r := t % rows
	order := make([]int, n)
	for j := range order {
		// 0, 1, n-1, 2, n-2, ...: every difference between neighbours
		// once.
		base := (j + 1) / 2
		if j%2 == 0 && j > 0 {
			base = n - j/2
		}
		order[j] = (base + r) % n
	}
	if r >= n {
		slices.Reverse(order)
	}
	return order
}

// designRows is the number of rows of groupOrder's design for n modes: n
// for an even n, 2n for an odd one.
func designRows(n int) int {
	if n%2 == 1 {
		return 2 * n
	}
	return n
}

// verdict judges a goal of at most goal from a confidence interval lo..hi.
func verdict(lo, hi, goal float64) string {
	switch {
	case hi <= goal:
		return "met"
	case lo > goal:
		return "not met"
	default:
		return "inconclusive"
	}
}

// bpf is the BPF statistics part of BenchmarkOffCPUOverhead.
func (c offCPUBench) bpf(b *testing.B) {
	empty := emptySwitchProgram(b)
	var offNs, emptyNs, netNs, netShare, perTrip []float64
	var walks uint64
	var walkRT time.Duration
	taskWork := false
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for range statsRounds {
			res := c.round(b, empty, modeStats)
			o := float64(res.offRT.Nanoseconds()) / float64(res.offRuns)
			e := float64(res.emptyRT.Nanoseconds()) / float64(res.emptyRuns)
			offNs = append(offNs, o)
			emptyNs = append(emptyNs, e)
			netNs = append(netNs, o-e)
			netShare = append(netShare, 100*(o-e)*float64(res.offRuns)/float64(res.pipe.Nanoseconds()))
			perTrip = append(perTrip, float64(res.offRuns)/float64(c.loops))
			walks += res.walks
			walkRT += res.walkRT
			taskWork = res.taskWork
		}
	}
	b.StopTimer()
	if taskWork && walks == 0 {
		b.Fatal("the off-CPU task work never ran: no user stack walked")
	}
	med := func(xs []float64) float64 { m, _, _ := medianCI(xs, ciLevel); return m }
	b.ReportMetric(med(offNs), "bpf-ns/switch")
	b.ReportMetric(med(emptyNs), "empty-prog-ns/switch")
	b.ReportMetric(med(netNs), "bpf-net-ns/switch")
	b.ReportMetric(med(netShare), "%bpf-net-of-time")
	b.ReportMetric(med(perTrip), "switches/roundtrip")
	if walks > 0 {
		b.ReportMetric(float64(walkRT.Nanoseconds())/float64(walks), "walk-ns/kept-wait")
	}
	b.Logf("%s: BPF ns/switch with statistics on: off-CPU %.1f, empty %.1f, net %.1f; "+
		"user stacks walked in task work: %v (%d walks)", c.name, offNs, emptyNs, netNs, taskWork, walks)
}

// medianCI returns the median of xs and a distribution-free confidence
// interval for it at level: the order statistics x(k) and x(n+1-k) with
// k the largest for which a Binomial(n, 1/2) falls below k with
// probability at most (1-level)/2. With too few xs for that, the interval
// is NaN..NaN.
func medianCI(xs []float64, level float64) (median, lo, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	if n%2 == 1 {
		median = s[n/2]
	} else {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	// cdf(j) = P(Binomial(n, 1/2) <= j).
	cdf := func(j int) float64 {
		p, term := 0.0, math.Pow(0.5, float64(n))
		for i := 0; i <= j; i++ {
			p += term
			term = term * float64(n-i) / float64(i+1)
		}
		return p
	}
	k := 0
	for k+1 <= n/2 && cdf(k) <= (1-level)/2 {
		k++
	}
	if k == 0 {
		return median, math.NaN(), math.NaN()
	}
	return median, s[k-1], s[n-k]
}

// warmUp runs c's command until the receiver has loaded its process, with
// the unwind table of its executable, then kills it: the round's process
// maps the same files, whose tables are then built and loaded already
// (waitIdle waits for those of its libraries), in every mode alike.
func (c offCPUBench) warmUp(b *testing.B, r *profilesReceiver) {
	cmd := exec.Command(c.warm[0], c.warm[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting %s: %v", strings.Join(c.warm, " "), err)
	}
	defer func() {
		// The process group: the pipe's child too.
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(10 * time.Second); ; {
		if addr, ok := executableText(pid, c.exe); ok && r.unwind.Covers(uint32(pid), addr) {
			return
		}
		if time.Now().After(deadline) {
			addr, ok := executableText(pid, c.exe)
			b.Fatalf("the receiver did not load %s's process with its unwind table within 10 s "+
				"(text of %s at %#x: %v; loader: %+v)", strings.Join(c.warm, " "), c.exe, addr, ok, r.unwind.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// executableText is the start of pid's executable mapping of exe.
func executableText(pid int, exe string) (uint64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "r-xp" || f[5] != exe {
			continue
		}
		start, _, _ := strings.Cut(f[0], "-")
		addr, err := strconv.ParseUint(start, 16, 64)
		return addr, err == nil
	}
	return 0, false
}

// waitIdle waits for the receiver's start-up work (loading the CFI of every
// process it sees) to end, so that it does not fall in a round: until this
// process uses under 5% of a CPU over a window longer than a drain interval
// (processes seen in samples are loaded as the drain reads them: a shorter
// window falls between two drains), for at most 10 s. It reports whether
// that happened. The garbage of earlier rounds' receivers is collected
// first, so that no round pays for another's.
func waitIdle(b *testing.B) bool {
	runtime.GC()
	cpu := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			b.Fatalf("reading own CPU time: %v", err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	const window = drainInterval + 100*time.Millisecond
	time.Sleep(200 * time.Millisecond)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		c0 := cpu()
		time.Sleep(window)
		if cpu()-c0 < window/20 {
			return true
		}
	}
	return false
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute averages.
func loadAverage(b testing.TB) string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatalf("reading load average: %v", err)
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		b.Fatalf("load average %q: fewer than 3 fields", data)
	}
	return strings.Join(f[:3], " ")
}

func TestMedianCI(t *testing.T) {
	// 31 values: the 90% interval is x(11)..x(21), the binomial's
	// P(X <= 10) being 0.035 and P(X <= 11) 0.075.
	xs := make([]float64, 31)
	for i := range xs {
		xs[i] = float64(30 - i) // reversed: medianCI sorts
	}
	m, lo, hi := medianCI(xs, 0.90)
	if m != 15 || lo != 10 || hi != 20 {
		t.Errorf("31 values 0..30: median %v, interval %v..%v; want 15, 10..20", m, lo, hi)
	}
	// 7 values: only min..max covers 90% (P(X = 0) = 1/128, P(X <= 1) =
	// 8/128); 4 values cannot (P(X = 0) = 1/16).
	m, lo, hi = medianCI([]float64{3, 1, 2, 7, 5, 4, 6}, 0.90)
	if m != 4 || lo != 1 || hi != 7 {
		t.Errorf("1..7: median %v, interval %v..%v; want 4, 1..7", m, lo, hi)
	}
	m, lo, hi = medianCI([]float64{1, 2, 3, 4}, 0.90)
	if m != 2.5 || !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("1..4: median %v, interval %v..%v; want 2.5, NaN..NaN", m, lo, hi)
	}
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{{-1, 2.9, "met"}, {1, 3, "met"}, {2, 4, "inconclusive"}, {3.1, 5, "not met"}} {
		if got := verdict(c.lo, c.hi, 3); got != c.want {
			t.Errorf("verdict(%v, %v, 3) = %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
}

func TestGroupOrder(t *testing.T) {
	// 5 and 6: the benchmark's groups without and with modeHeld, whose
	// default number of groups must be whole cycles of the design.
	for _, n := range []int{5, 6} {
		if wallTriples%designRows(n) != 0 {
			t.Errorf("%d groups of %d modes: not whole cycles of %d rows", wallTriples, n, designRows(n))
		}
	}
	for _, n := range []int{3, 4, 5, 6, 7} {
		rows := designRows(n)
		if want := n + n%2*n; rows != want {
			t.Errorf("n=%d: %d rows, want %d", n, rows, want)
		}
		places := map[[2]int]int{}
		follows := map[[2]int]int{}
		for g := range rows {
			order := groupOrder(g, n)
			if !slices.Equal(order, groupOrder(g+rows, n)) {
				t.Errorf("n=%d: group %d and %d differ: the design does not repeat", n, g, g+rows)
			}
			seen := map[int]bool{}
			for i, m := range order {
				if m < 0 || m >= n || seen[m] {
					t.Fatalf("n=%d, group %d: %v is not an order of 0..%d", n, g, order, n-1)
				}
				seen[m] = true
				places[[2]int{m, i}]++
				if i > 0 {
					follows[[2]int{order[i-1], m}]++
				}
			}
		}
		// Each mode in each place, and after each other mode, rows/n
		// times.
		for m := range n {
			for i := range n {
				if got := places[[2]int{m, i}]; got != rows/n {
					t.Errorf("n=%d: mode %d in place %d %d times, want %d", n, m, i, got, rows/n)
				}
			}
			for p := range n {
				want := rows / n
				if p == m {
					want = 0
				}
				if got := follows[[2]int{p, m}]; got != want {
					t.Errorf("n=%d: mode %d after mode %d %d times, want %d", n, m, p, got, want)
				}
			}
		}
	}
}

func TestPerfPipeTime(t *testing.T) {
	out := []byte("# Running 'sched/pipe' benchmark:\n# Executed 20000 pipe operations between two processes\n\n" +
		"     Total time: 0.335 [sec]\n\n      16.765400 usecs/op\n          59646 ops/sec\n")
	if d, err := perfPipeTime(out, 20000); err != nil || d != 335*time.Millisecond {
		t.Errorf("perfPipeTime = %v, %v; want 335ms", d, err)
	}
	// Fewer round trips than asked, or none counted, or no time: the
	// round did not do its work.
	if _, err := perfPipeTime(out, 80000); err == nil {
		t.Error("20000 round trips accepted for 80000")
	}
	for _, bad := range []string{
		"     Total time: 0.335 [sec]\n",
		"# Executed 20000 pipe operations between two processes\n",
		"# Executed 20000 pipe operations between two processes\n     Total time: 0.000 [sec]\n",
	} {
		if _, err := perfPipeTime([]byte(bad), 20000); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
