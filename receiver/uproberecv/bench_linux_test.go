package uproberecv

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

// countingLogs counts consumed log records.
type countingLogs struct{ records atomic.Int64 }

func (c *countingLogs) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (c *countingLogs) ConsumeLogs(_ context.Context, l plog.Logs) error {
	c.records.Add(int64(l.LogRecordCount()))
	return nil
}

// BenchmarkRingbufToPlog measures records/s from the ringbuf to consumed
// plog: a BPF program (BPF_PROG_TEST_RUN) writes synthetic records as fast
// as the receiver reads them, never more than half the ringbuf ahead, so
// none is lost.
func BenchmarkRingbufToPlog(b *testing.B) {
	testenv.RequireBPF(b)
	cfg := &Config{Probes: []ProbeConfig{{ID: "bench", Binary: "/nonexistent/bench", Entry: "f", Exit: "return"}}}
	next := &countingLogs{}
	r, err := newLogsReceiver(receivertest.NewNopSettings(metadata.Type), cfg, next)
	if err != nil {
		b.Fatal(err)
	}
	r.opts = options{loadFiller: true}
	if err := r.Start(context.Background(), componentHost{}); err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown(context.Background())

	const batch = 1024
	ahead := int64(ringBufferBytes / 2 / 64) // records of ~64 bytes with header
	b.ResetTimer()
	start := time.Now()
	var produced int64
	for produced < int64(b.N) {
		for produced-next.records.Load() > ahead {
			time.Sleep(50 * time.Microsecond)
		}
		n := min(int64(batch), int64(b.N)-produced)
		if err := r.probes.Fill(uint32(n), 0); err != nil {
			b.Fatal(err)
		}
		produced += n
	}
	for next.records.Load() < produced {
		time.Sleep(100 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	c, err := r.probes.Counters()
	if err != nil {
		b.Fatal(err)
	}
	if c.LostRingbuf != 0 {
		b.Fatalf("%d records lost", c.LostRingbuf)
	}
	b.ReportMetric(float64(produced)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(c.LostRingbuf), "lost")
}

// BenchmarkExecStormCPU measures this process's CPU time per spawn of a
// stripped binary without the symbol, with and without the negative cache.
func BenchmarkExecStormCPU(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts options
	}{
		{"negative_cache", options{}},
		{"no_negative_cache", options{noNegativeCache: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// A Go binary: parsing its .gopclntab is the cost the cache saves.
			bin := goStormBinary(b)
			cfg := &Config{Probes: []ProbeConfig{{ID: "storm", Binary: bin, Entry: "main.absent", Exit: "return"}}}
			r, _ := startReceiver(b, cfg, bc.opts)
			st := &r.tracker.stats
			const spawns = 200
			b.ResetTimer()
			var cpu time.Duration
			for range b.N {
				before := st.scans.Load()
				t0 := cpuTime(b)
				runStorm(b, bin, spawns, 200)
				waitFor(10*time.Second, func() bool { return st.scans.Load()-before >= spawns*9/10 })
				cpu += cpuTime(b) - t0
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*spawns), "cpu-µs/spawn")
			b.ReportMetric(float64(st.evaluations.Load())/float64(b.N*spawns), "parses/spawn")
		})
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func goStormBinary(b *testing.B) string {
	return testworkload.BuildGo(b, "gostorm", "-ldflags=-s -w")
}
