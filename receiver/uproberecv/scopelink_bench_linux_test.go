package uproberecv

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

// BenchmarkScopeLinkCost measures the BPF time of a probed call (entry and
// exit programs together, kernel BPF statistics) with the receiver alone
// and with an ebpfprof receiver declared in the collector, when each
// outermost scope is also written to, and deleted from, the shared map of
// open scopes. Each round checks its work: the entry and exit programs
// ran once each per call, and every call became one record.
func BenchmarkScopeLinkCost(b *testing.B) {
	testenv.RequireBPF(b)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time statistics: %v", err)
	}
	defer stats.Close()
	bin := testworkload.BuildC(b, "fastprobe.c", "-O2", "-fcf-protection=full", "-fno-omit-frame-pointer")
	const calls = 200000
	run := func(linked bool) float64 {
		if linked {
			defer scopes.Declare(scopes.Reader)()
		}
		cfg := &Config{Probes: []ProbeConfig{{ID: "f", Binary: bin, Entry: "f_push", Exit: "return"}}}
		next := new(countingLogs)
		r, err := newLogsReceiver(receivertest.NewNopSettings(metadata.Type), cfg, next)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Start(context.Background(), componentHost{}); err != nil {
			b.Fatal(err)
		}
		defer r.Shutdown(context.Background())
		if linked != scopes.Open() {
			b.Fatalf("shared map open: %v, want %v", scopes.Open(), linked)
		}
		ids, err := r.probes.ProgramIDs()
		if err != nil {
			b.Fatal(err)
		}
		total := func() (rt time.Duration, n uint64) {
			for _, id := range ids {
				p, err := ebpf.NewProgramFromID(id)
				if err != nil {
					b.Fatal(err)
				}
				st, err := p.Stats()
				p.Close()
				if err != nil {
					b.Fatal(err)
				}
				rt += st.Runtime
				n += st.RunCount
			}
			return rt, n
		}
		rt0, n0 := total()
		if out, err := exec.Command(bin, "f_push", strconv.Itoa(calls)).CombinedOutput(); err != nil {
			b.Fatalf("fastprobe: %v\n%s", err, out)
		}
		// Fixed-cookie copies are loaded at attach: list them again.
		if ids, err = r.probes.ProgramIDs(); err != nil {
			b.Fatal(err)
		}
		rt1, n1 := total()
		b.Logf("linked %v: %d program runs, %s", linked, n1-n0, rt1-rt0)
		// An unattached probe would report about 0 ns per call. The
		// workload makes one warm-up call before its calls.
		const made = calls + 1
		if n1-n0 != 2*made {
			b.Fatalf("linked %v: the scope programs ran %d times for %d calls, want %d (entry and exit)", linked, n1-n0, made, 2*made)
		}
		if !waitUntil(30*time.Second, func() bool { return next.records.Load() >= made }) || next.records.Load() != made {
			b.Fatalf("linked %v: %d records for %d calls", linked, next.records.Load(), made)
		}
		return float64((rt1 - rt0).Nanoseconds()) / made
	}
	// Alternating rounds, medians: the machine's drifting load falls on
	// both alike.
	var alone, linked []float64
	for b.Loop() {
		alone = append(alone, run(false))
		linked = append(linked, run(true))
	}
	slices.Sort(alone)
	slices.Sort(linked)
	b.ReportMetric(alone[len(alone)/2], "bpf-ns/call-alone")
	b.ReportMetric(linked[len(linked)/2], "bpf-ns/call-linked")
}
