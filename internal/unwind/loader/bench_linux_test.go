package loader

import (
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// fpComplete is the share of complete stacks the fp run of
// BenchmarkBPFTimePerSample measured, for the cfi run to beat.
var fpComplete = -1.0

// BenchmarkBPFTimePerSample measures the sampling program's own time per
// sample (kernel BPF statistics: run time / run count, plus the task work
// that reads the process's mappings and walks its first sample, which
// times itself) on a python3.11 workload, with the stack walked by frame
// pointers only (no table ever loaded) and by CFI. Each iteration samples
// for one second at 997 Hz; only the workload's thread is sampled, so
// nothing else is in the figure. The cfi run checks that its stacks were
// walked with CFI and are more often complete than the fp run's, so that
// a silent fall-back cannot look cheap.
func BenchmarkBPFTimePerSample(b *testing.B) {
	for _, mode := range []string{"fp", "cfi"} {
		b.Run(mode, func(b *testing.B) {
			testenv.RequireBPF(b)
			enabled, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
			if err != nil {
				b.Fatalf("enabling BPF run-time statistics: %v", err)
			}
			defer enabled.Close()
			py := exec.Command("/usr/bin/python3.11", "-c", `
import json
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
while True:
    fib(20)
    json.loads(json.dumps([{"k": i} for i in range(500)]))
`)
			if err := py.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { py.Process.Kill(); py.Wait() }()
			time.Sleep(200 * time.Millisecond)
			opts := profiler.Options{Frequency: 997, PID: py.Process.Pid}
			var s *profiler.Sampler
			if mode == "cfi" {
				l := newTestLoader(b, opts, Config{}, true)
				waitReady(b, l, py.Process.Pid)
				time.Sleep(time.Second) // every file its stacks enter loaded
				waitReady(b, l, py.Process.Pid)
				s = l.s
			} else {
				var err error
				if s, err = profiler.New(opts); err != nil {
					b.Fatal(err)
				}
				defer s.Close()
			}
			var ts unix.Timespec
			unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
			measuredFrom := uint64(ts.Nano())
			// Drain the ringbuf, so that no run is cut short by a full one.
			var samples, complete, frames, walkedCFI int
			done := make(chan struct{})
			s.SetDeadline(time.Now().Add(100 * time.Millisecond))
			go func() {
				defer close(done)
				var smp profiler.Sample
				for {
					err := s.Read(&smp)
					if errors.Is(err, profiler.ErrClosed) {
						return
					}
					if err != nil {
						s.SetDeadline(time.Now().Add(100 * time.Millisecond))
						continue
					}
					if smp.KtimeNs < measuredFrom {
						continue // sampled while the tables were loading
					}
					samples++
					frames += len(smp.User)
					if smp.CFI {
						walkedCFI++
					}
					if smp.Complete {
						complete++
					}
				}
			}()
			rt0, n0, err := s.RunStats()
			if err != nil {
				b.Fatal(err)
			}
			ct0, _, err := s.ComposeStats()
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				time.Sleep(time.Second)
			}
			b.StopTimer()
			rt, n, err := s.RunStats()
			if err != nil {
				b.Fatal(err)
			}
			ct, _, err := s.ComposeStats()
			if err != nil {
				b.Fatal(err)
			}
			s.Close()
			<-done
			if n == n0 || samples == 0 {
				b.Fatal("the program never ran")
			}
			b.ReportMetric(float64((rt-rt0+ct-ct0).Nanoseconds())/float64(n-n0), "ns/sample")
			b.ReportMetric(float64(frames)/float64(samples), "frames/sample")
			pct := 100 * float64(complete) / float64(samples)
			b.ReportMetric(pct, "%complete")
			switch mode {
			case "fp":
				fpComplete = pct
			case "cfi":
				if walkedCFI < samples*9/10 {
					b.Fatalf("only %d of %d samples walked with CFI", walkedCFI, samples)
				}
				if fpComplete >= 0 && pct <= fpComplete {
					b.Fatalf("CFI stacks %.1f%% complete, frame-pointer ones %.1f%%", pct, fpComplete)
				}
			}
		})
	}
}
