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

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// Shape of BenchmarkOffCPUOverhead's iterations: sets of rounds, each one
// `perf bench sched pipe` of pipeLoops round trips.
const (
	offCPUBenchPairs = 7
	pipeLoops        = 100_000
)

var perfTotalTime = regexp.MustCompile(`Total time:\s+([0-9.]+) \[sec\]`)

// BenchmarkOffCPUOverhead measures what off-CPU profiling at its defaults
// (probability 0.05, min_duration 1ms) costs a context-switch-heavy
// workload: `perf bench sched pipe`, two tasks ping-ponging over pipes, run
// under the receiver with off_cpu disabled and enabled, in alternating
// rounds so that the machine's drifting load falls on both alike. It
// reports the median slowdown of the pairs, the off-CPU program's own time
// per context switch (kernel BPF statistics, every switch on the host while
// it was enabled), and that time as a share of a round trip without
// off-CPU profiling (two switches each): the slowdown it accounts for,
// which a loaded machine's noise does not blur. Where user stacks are
// walked in task work (kernel 6.18), the walk's own time per kept wait is
// reported too: a thread sleeping 2 ms at a time, in every round, gives it
// waits to keep (the pipe's waits are all shorter than min_duration). The
// benchmark fails if a program did not run, and logs the load average.
//
// A third round in each set runs an empty tp_btf/sched_switch program
// instead: the floor any such program costs, in wall-clock slowdown and in
// the kernel's statistics, whose own clock reads fall inside every run.
//
// It runs twice: with the two tasks free to run on any CPU, as `perf bench`
// does by default, and with both on one CPU. There no switch waits for an
// idle CPU to wake up, so a round trip is as short as it gets: the worst
// case for a per-switch cost.
func BenchmarkOffCPUOverhead(b *testing.B) {
	testenv.RequireBPF(b)
	perf := testenv.LookPath(b, "perf")
	taskset := testenv.LookPath(b, "taskset")
	pipe := []string{"bench", "sched", "pipe", "-l", strconv.Itoa(pipeLoops)}
	b.Run("any-cpu", func(b *testing.B) { offCPUOverhead(b, perf, pipe...) })
	last := strconv.Itoa(runtime.NumCPU() - 1)
	b.Run("one-cpu", func(b *testing.B) { offCPUOverhead(b, taskset, append([]string{"-c", last, perf}, pipe...)...) })
}

// offCPUOverhead is BenchmarkOffCPUOverhead with the pipe benchmark run as
// the command name with args.
func offCPUOverhead(b *testing.B, name string, args ...string) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time statistics: %v", err)
	}
	defer stats.Close()
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
	var emptySlowdowns []float64
	var emptyTime time.Duration
	var emptySwitches uint64

	var slowdowns []float64
	var offTotal time.Duration
	var bpfTime, walkTime time.Duration
	var switches, walks uint64
	taskWork := false
	// round runs the pipe benchmark under a receiver and returns its time;
	// withEmpty attaches the empty program for it.
	round := func(offCPU, withEmpty bool) time.Duration {
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
		time.Sleep(500 * time.Millisecond) // past start-up work
		st0, err := empty.Stats()
		if err != nil {
			b.Fatal(err)
		}
		var rt0, wt0 time.Duration
		var n0, w0 uint64
		if offCPU {
			if rt0, n0, err = r.sampler.OffCPURunStats(); err != nil {
				b.Fatal(err)
			}
			if wt0, w0, err = r.sampler.OffCPUWalkStats(); err != nil {
				b.Fatal(err)
			}
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
		if offCPU {
			rt, n, err := r.sampler.OffCPURunStats()
			if err != nil {
				b.Fatal(err)
			}
			bpfTime += rt - rt0
			switches += n - n0
			wt, w, err := r.sampler.OffCPUWalkStats()
			if err != nil {
				b.Fatal(err)
			}
			walkTime += wt - wt0
			walks += w - w0
		}
		st, err := empty.Stats()
		if err != nil {
			b.Fatal(err)
		}
		emptyTime += st.Runtime - st0.Runtime
		emptySwitches += st.RunCount - st0.RunCount
		return time.Duration(secs * float64(time.Second))
	}

	load0 := loadAverage(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for pair := 0; pair < offCPUBenchPairs; pair++ {
			// Alternate which mode goes first; the empty program's
			// round goes in between.
			var off, on, bare time.Duration
			if pair%2 == 0 {
				off, bare, on = round(false, false), round(false, true), round(true, false)
			} else {
				on, bare, off = round(true, false), round(false, true), round(false, false)
			}
			slowdowns = append(slowdowns, 100*(on.Seconds()/off.Seconds()-1))
			emptySlowdowns = append(emptySlowdowns, 100*(bare.Seconds()/off.Seconds()-1))
			offTotal += off
		}
	}
	b.StopTimer()
	if switches == 0 {
		b.Fatal("the off-CPU sched_switch program never ran")
	}
	if taskWork && walks == 0 {
		b.Fatal("the off-CPU task work never ran: no user stack walked")
	}
	if emptySwitches == 0 {
		b.Fatal("the empty sched_switch program never ran")
	}
	slices.Sort(slowdowns)
	slices.Sort(emptySlowdowns)
	b.ReportMetric(slowdowns[len(slowdowns)/2], "%slowdown")
	b.ReportMetric(emptySlowdowns[len(emptySlowdowns)/2], "%slowdown-empty-prog")
	b.ReportMetric(float64(emptyTime.Nanoseconds())/float64(emptySwitches), "empty-prog-ns/switch")
	perSwitch := float64(bpfTime.Nanoseconds()) / float64(switches)
	b.ReportMetric(perSwitch, "bpf-ns/switch")
	// A round trip of the pipe benchmark is two context switches: the
	// slowdown the BPF time alone adds, free of the machine's noise.
	perLoop := float64(offTotal.Nanoseconds()) / float64(len(slowdowns)*pipeLoops)
	b.ReportMetric(perLoop, "ns/roundtrip")
	b.ReportMetric(100*2*perSwitch/perLoop, "%bpf-of-roundtrip")
	if walks > 0 {
		b.ReportMetric(float64(walkTime.Nanoseconds())/float64(walks), "walk-ns/kept-wait")
		// The walks' time spread over every switch: what they add to it.
		b.ReportMetric(float64(walkTime.Nanoseconds())/float64(switches), "walk-ns/switch")
	}
	b.Logf("slowdowns of %d sets (%%): off-CPU %.2f, empty program %.2f; user stacks walked in task work: %v (%d walks); load average %s before, %s after",
		len(slowdowns), slowdowns, emptySlowdowns, taskWork, walks, load0, loadAverage(b))
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
