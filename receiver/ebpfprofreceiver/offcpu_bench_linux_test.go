package ebpfprofreceiver

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
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
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// Shape of BenchmarkOffCPUOverhead's iterations: wallSets sets of
// wall-clock rounds (off, on, empty program), then statsRounds rounds with
// kernel BPF statistics on. A round is one `perf bench sched pipe` run of
// about a second.
const (
	wallSets    = 11
	statsRounds = 3
)

var perfTotalTime = regexp.MustCompile(`Total time:\s+([0-9.]+) \[sec\]`)

// BenchmarkOffCPUOverhead measures what off-CPU profiling at its defaults
// (probability 0.05, min_duration 1ms) costs a context-switch-heavy
// workload: `perf bench sched pipe`, two tasks ping-ponging over pipes.
//
// Wall-clock rounds run the pipe under the receiver with off_cpu disabled
// ("off"), enabled ("on"), and disabled with an empty tp_btf/sched_switch
// program attached ("empty": the floor any such program costs), in sets
// whose order alternates so that the machine's drifting load falls on all
// alike. Kernel BPF statistics are off there: with them on, every program
// run pays two clock reads, which would be counted as off-CPU's cost. It
// reports the median slowdown of the sets against "off" and its spread
// (interquartile range).
//
// Separate rounds then run with the statistics on and both the off-CPU
// program and the empty one attached, for the BPF time per context switch:
// the off-CPU program's, the empty one's (mostly the statistics' own clock
// reads, in both), and the difference, the off-CPU program's own work, also
// as a share of a round trip without off-CPU profiling (two switches each):
// the slowdown it accounts for, which a loaded machine's noise does not
// blur. Where user stacks are walked in task work (kernel 6.18), the walk's
// own time per kept wait is reported too: a thread sleeping 2 ms at a time,
// in every round, gives it waits to keep (the pipe's waits are all shorter
// than min_duration).
//
// The benchmark fails if the off-CPU program did not run in a round it
// was on for (its counters, or its statistics, stayed still), and logs the
// load average, and how many wall-clock rounds had the statistics enabled
// by another process all the same.
//
// It runs twice: with the two tasks free to run on any CPU, as `perf bench`
// does by default, and with both on one CPU. There no switch waits for an
// idle CPU to wake up, so a round trip is as short as it gets: the worst
// case for a per-switch cost.
func BenchmarkOffCPUOverhead(b *testing.B) {
	testenv.RequireBPF(b)
	perf := testenv.LookPath(b, "perf")
	taskset := testenv.LookPath(b, "taskset")
	pipe := func(loops int) []string {
		return []string{"bench", "sched", "pipe", "-l", strconv.Itoa(loops)}
	}
	b.Run("any-cpu", func(b *testing.B) { offCPUOverhead(b, perf, pipe(50_000)...) })
	last := strconv.Itoa(runtime.NumCPU() - 1)
	b.Run("one-cpu", func(b *testing.B) {
		offCPUOverhead(b, taskset, append([]string{"-c", last, perf}, pipe(200_000)...)...)
	})
}

// offCPUOverhead is BenchmarkOffCPUOverhead with the pipe benchmark run as
// the command name with args.
func offCPUOverhead(b *testing.B, name string, args ...string) {
	loops, err := strconv.Atoi(args[len(args)-1])
	if err != nil {
		b.Fatal(err)
	}
	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceRawTp,
		AttachTo:     "sched_switch",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		b.Fatalf("loading an empty sched_switch program: %v", err)
	}
	defer empty.Close()

	var walkTime time.Duration
	var walks uint64
	taskWork := false
	wallWithStats := 0
	// round runs the pipe benchmark under a receiver and returns its
	// time; withEmpty attaches the empty program for it, stats enables
	// kernel BPF statistics and returns the BPF time per run of the
	// off-CPU and the empty program (zero for one not attached).
	round := func(offCPU, withEmpty, stats bool) (pipe time.Duration, offNs, emptyNs float64) {
		cfg := createDefaultConfig().(*Config)
		cfg.OffCPU.Enabled = offCPU
		r, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			b.Fatal(err)
		}
		defer func() {
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
		waitIdle(b)
		if stats {
			s, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
			if err != nil {
				b.Fatalf("enabling BPF run-time statistics: %v", err)
			}
			defer s.Close()
		}
		type runStats struct {
			rt time.Duration
			n  uint64
		}
		read := func() (off, emp runStats, c profiler.Counters, wt time.Duration, w uint64) {
			if offCPU {
				var err error
				if off.rt, off.n, err = r.sampler.OffCPURunStats(); err != nil {
					b.Fatal(err)
				}
				if wt, w, err = r.sampler.OffCPUWalkStats(); err != nil {
					b.Fatal(err)
				}
				if c, err = r.sampler.Counters(); err != nil {
					b.Fatal(err)
				}
			}
			st, err := empty.Stats()
			if err != nil {
				b.Fatal(err)
			}
			return off, runStats{st.Runtime, st.RunCount}, c, wt, w
		}
		// The sampling program's runs are counted only while the
		// statistics are on, by this process or by another.
		_, sampled0, err := r.sampler.RunStats()
		if err != nil {
			b.Fatal(err)
		}
		off0, emp0, c0, wt0, w0 := read()
		if offCPU {
			taskWork = r.sampler.OffCPUTaskWork()
		}
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
		out, err := exec.Command(name, args...).CombinedOutput()
		close(stop)
		<-slept
		if err != nil {
			b.Fatalf("perf bench sched pipe: %v\n%s", err, out)
		}
		m := perfTotalTime.FindSubmatch(out)
		if m == nil {
			b.Fatalf("no total time in perf's output:\n%s", out)
		}
		secs, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			b.Fatal(err)
		}
		off1, emp1, c1, wt1, w1 := read()
		_, sampled1, err := r.sampler.RunStats()
		if err != nil {
			b.Fatal(err)
		}
		if !stats && sampled1 != sampled0 {
			// Another process's: this round's programs paid for it.
			wallWithStats++
		}
		if offCPU {
			// Every sampled switch-out of the pipe is counted short,
			// every one of the sleeper's is kept.
			if c1.OffCPUShort == c0.OffCPUShort || c1.OffCPUEvents == c0.OffCPUEvents {
				b.Fatalf("the off-CPU program did not run: %d short waits, %d events",
					c1.OffCPUShort-c0.OffCPUShort, c1.OffCPUEvents-c0.OffCPUEvents)
			}
			walkTime += wt1 - wt0
			walks += w1 - w0
		}
		perRun := func(a, z runStats, on bool) float64 {
			if !stats || !on {
				return 0
			}
			if a.n == z.n {
				b.Fatal("a sched_switch program did not run with statistics on")
			}
			return float64((a.rt - z.rt).Nanoseconds()) / float64(a.n-z.n)
		}
		return time.Duration(secs * float64(time.Second)), perRun(off1, off0, offCPU), perRun(emp1, emp0, withEmpty)
	}

	load0 := loadAverage(b)
	var slowdowns, emptySlowdowns, offNs, emptyNs []float64
	var offTotal time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for set := 0; set < wallSets; set++ {
			// Alternate which mode goes first; the empty program's
			// round goes in between.
			var off, on, bare time.Duration
			if set%2 == 0 {
				off, _, _ = round(false, false, false)
				bare, _, _ = round(false, true, false)
				on, _, _ = round(true, false, false)
			} else {
				on, _, _ = round(true, false, false)
				bare, _, _ = round(false, true, false)
				off, _, _ = round(false, false, false)
			}
			slowdowns = append(slowdowns, 100*(on.Seconds()/off.Seconds()-1))
			emptySlowdowns = append(emptySlowdowns, 100*(bare.Seconds()/off.Seconds()-1))
			offTotal += off
		}
		for range statsRounds {
			_, o, e := round(true, true, true)
			offNs = append(offNs, o)
			emptyNs = append(emptyNs, e)
		}
	}
	b.StopTimer()
	if taskWork && walks == 0 {
		b.Fatal("the off-CPU task work never ran: no user stack walked")
	}
	slowdown, lo, hi := quartiles(slowdowns)
	b.ReportMetric(slowdown, "%slowdown")
	b.ReportMetric(hi-lo, "%slowdown-iqr")
	emptySlowdown, elo, ehi := quartiles(emptySlowdowns)
	b.ReportMetric(emptySlowdown, "%slowdown-empty-prog")
	perSwitch, _, _ := quartiles(offNs)
	emptyPerSwitch, _, _ := quartiles(emptyNs)
	net := make([]float64, len(offNs))
	for i := range offNs {
		net[i] = offNs[i] - emptyNs[i]
	}
	netPerSwitch, _, _ := quartiles(net)
	b.ReportMetric(perSwitch, "bpf-ns/switch")
	b.ReportMetric(emptyPerSwitch, "empty-prog-ns/switch")
	b.ReportMetric(netPerSwitch, "bpf-net-ns/switch")
	perLoop := float64(offTotal.Nanoseconds()) / float64(len(slowdowns)*loops)
	b.ReportMetric(perLoop, "ns/roundtrip")
	b.ReportMetric(100*2*netPerSwitch/perLoop, "%bpf-net-of-roundtrip")
	if walks > 0 {
		b.ReportMetric(float64(walkTime.Nanoseconds())/float64(walks), "walk-ns/kept-wait")
	}
	b.Logf("slowdowns of %d sets (%%): off-CPU %.2f (IQR %.2f..%.2f), empty program %.2f (IQR %.2f..%.2f); "+
		"BPF ns/switch with statistics on: off-CPU %.1f, empty %.1f; user stacks walked in task work: %v (%d walks); "+
		"wall-clock rounds with BPF statistics enabled by another process: %d; load average %s before, %s after",
		len(slowdowns), slowdowns, lo, hi, emptySlowdowns, elo, ehi, offNs, emptyNs, taskWork, walks, wallWithStats, load0, loadAverage(b))
}

// quartiles returns the median of xs and its first and third quartiles.
func quartiles(xs []float64) (median, q1, q3 float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	at := func(q float64) float64 {
		// Linear between the nearest ranks.
		pos := q * float64(len(s)-1)
		i := int(pos)
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return s[i] + (pos-float64(i))*(s[i+1]-s[i])
	}
	return at(0.5), at(0.25), at(0.75)
}

// waitIdle waits for the receiver's start-up work (loading the CFI of every
// process) to end, so that it does not fall in a round: until this process
// uses under 5% of a CPU over 100 ms, for at least 300 ms and at most 5 s.
func waitIdle(b *testing.B) {
	cpu := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			b.Fatalf("reading own CPU time: %v", err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	time.Sleep(200 * time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		c0 := cpu()
		time.Sleep(100 * time.Millisecond)
		if cpu()-c0 < 5*time.Millisecond {
			return
		}
	}
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute averages.
func loadAverage(b *testing.B) string {
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
