package scopes_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// BenchmarkSampleScopeLookup measures the BPF time per on-CPU sample (kernel
// BPF statistics) of a sampler alone, and of one loaded on the shared map
// of open scopes holding 1000 other scopes: with the sampled thread outside
// any scope (a miss by thread, then by goroutine) and inside one (a hit by
// thread). The difference is what scope profiles add to every sample.
func BenchmarkSampleScopeLookup(b *testing.B) {
	testenv.RequireBPF(b)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time statistics: %v", err)
	}
	defer stats.Close()
	bin := testworkload.BuildC(b, "cpuhog.c", testworkload.CPUHogFlags()...)
	hog := testworkload.Start(b, bin, "0")
	pid := hog.Process.Pid

	m, err := scopes.Acquire()
	if err != nil {
		b.Fatal(err)
	}
	defer m.Release()
	key := func(pid, kind uint32, id uint64) []byte {
		k := binary.LittleEndian.AppendUint32(nil, pid)
		k = binary.LittleEndian.AppendUint32(k, kind)
		return binary.LittleEndian.AppendUint64(k, id)
	}
	value := make([]byte, 32)
	for i := range 1000 {
		if err := m.Map().Put(key(uint32(1<<22+i), 0, uint64(i)), value); err != nil {
			b.Fatal(err)
		}
	}
	run := func(shared *ebpf.Map) float64 {
		s, err := profiler.New(profiler.Options{Frequency: 997, PID: pid, Scopes: shared})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		go func() {
			var smp profiler.Sample
			for s.Read(&smp) == nil {
			}
		}()
		time.Sleep(3 * time.Second)
		rt, n, err := s.RunStats()
		if err != nil || n == 0 {
			b.Fatalf("run stats: %v (%d runs)", err, n)
		}
		return float64(rt.Nanoseconds()) / float64(n)
	}
	for b.Loop() {
		alone := run(nil)
		miss := run(m.Map())
		if err := m.Map().Put(key(uint32(pid), 0, uint64(pid)), value); err != nil {
			b.Fatal(err)
		}
		hit := run(m.Map())
		if err := m.Map().Delete(key(uint32(pid), 0, uint64(pid))); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(alone, "ns/sample-alone")
		b.ReportMetric(miss, "ns/sample-outside-scope")
		b.ReportMetric(hit, "ns/sample-in-scope")
		fmt.Fprintf(os.Stderr, "pid %s: alone %.0f ns, outside a scope %.0f ns (+%.0f), in a scope %.0f ns (+%.0f)\n",
			strconv.Itoa(pid), alone, miss, miss-alone, hit, hit-alone)
	}
}
