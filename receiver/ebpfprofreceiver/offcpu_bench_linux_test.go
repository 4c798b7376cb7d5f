package ebpfprofreceiver

import (
	"context"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// Shape of BenchmarkOffCPUOverhead's iterations: pairs of rounds, each one
// `perf bench sched pipe` of pipeLoops round trips.
const (
	offCPUBenchPairs = 5
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
// which a loaded machine's noise does not blur.
func BenchmarkOffCPUOverhead(b *testing.B) {
	testenv.RequireBPF(b)
	perf := testenv.LookPath(b, "perf")
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time statistics: %v", err)
	}
	defer stats.Close()

	var slowdowns []float64
	var offTotal time.Duration
	var bpfTime time.Duration
	var switches uint64
	// round runs the pipe benchmark under a receiver and returns its time.
	round := func(offCPU bool) time.Duration {
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
		time.Sleep(500 * time.Millisecond) // past start-up work
		var rt0 time.Duration
		var n0 uint64
		if offCPU {
			if rt0, n0, err = r.sampler.OffCPURunStats(); err != nil {
				b.Fatal(err)
			}
		}
		out, err := exec.Command(perf, "bench", "sched", "pipe", "-l", strconv.Itoa(pipeLoops)).CombinedOutput()
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
		}
		return time.Duration(secs * float64(time.Second))
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for pair := 0; pair < offCPUBenchPairs; pair++ {
			// Alternate which mode goes first.
			var off, on time.Duration
			if pair%2 == 0 {
				off, on = round(false), round(true)
			} else {
				on, off = round(true), round(false)
			}
			slowdowns = append(slowdowns, 100*(on.Seconds()/off.Seconds()-1))
			offTotal += off
		}
	}
	b.StopTimer()
	slices.Sort(slowdowns)
	b.ReportMetric(slowdowns[len(slowdowns)/2], "%slowdown")
	if switches > 0 {
		perSwitch := float64(bpfTime.Nanoseconds()) / float64(switches)
		b.ReportMetric(perSwitch, "bpf-ns/switch")
		// A round trip of the pipe benchmark is two context switches: the
		// slowdown the BPF time alone adds, free of the machine's noise.
		perLoop := float64(offTotal.Nanoseconds()) / float64(len(slowdowns)*pipeLoops)
		b.ReportMetric(perLoop, "ns/roundtrip")
		b.ReportMetric(100*2*perSwitch/perLoop, "%bpf-of-roundtrip")
	}
	b.Logf("slowdowns of %d pairs (%%): %.2f", len(slowdowns), slowdowns)
}
