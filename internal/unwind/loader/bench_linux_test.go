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

// BenchmarkBPFTimePerSample measures the sampling program's own time per
// sample (kernel BPF statistics: run time / run count) on a python3.11
// workload, with the stack walked by frame pointers only (the process not
// loaded) and by CFI. Each iteration samples for one second at 997 Hz;
// only the workload's thread is sampled, so nothing else is in the figure.
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
			s, err := profiler.New(profiler.Options{Frequency: 997, PID: py.Process.Pid})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if mode == "cfi" {
				store := newStore(b)
				l := New(Config{Sink: s, Tables: store})
				loadAll(b, l, py.Process.Pid)
			}
			var ts unix.Timespec
			unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
			measuredFrom := uint64(ts.Nano())
			// Drain the ringbuf, so that no run is cut short by a full one.
			var samples, complete, frames int
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
					if smp.Complete {
						complete++
					}
				}
			}()
			rt0, n0, err := s.RunStats()
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
			s.Close()
			<-done
			if n == n0 {
				b.Fatal("the program never ran")
			}
			b.ReportMetric(float64((rt-rt0).Nanoseconds())/float64(n-n0), "ns/sample")
			if samples > 0 {
				b.ReportMetric(float64(frames)/float64(samples), "frames/sample")
				b.ReportMetric(100*float64(complete)/float64(samples), "%complete")
			}
		})
	}
}
