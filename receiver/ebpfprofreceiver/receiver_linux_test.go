package ebpfprofreceiver

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// profileWorkload runs bin under the receiver for d and returns its samples.
func profileWorkload(t *testing.T, bin string, d time.Duration) []pprofiletest.Sample {
	t.Helper()
	pid, all := profileRun(t, bin, d)
	var out []pprofiletest.Sample
	for _, p := range all {
		for _, s := range pprofiletest.Samples(p) {
			if s.PID == pid {
				out = append(out, s)
			}
		}
	}
	return out
}

// profileRun runs bin under the receiver (199 Hz, 1 s reports) for d, and
// returns its pid and every profile exported, checked for impossible
// frames.
func profileRun(t *testing.T, bin string, d time.Duration) (int64, []pprofile.Profiles) {
	t.Helper()
	testenv.RequireBPF(t)
	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	r := startProfilesReceiver(t, cfg, sink)
	cmd := testworkload.Start(t, bin)
	time.Sleep(d)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := sink.AllProfiles()
	checkNoImpossibleFrames(t, all)
	return int64(cmd.Process.Pid), all
}

// startProfilesReceiver starts a receiver with cfg, exporting to sink.
func startProfilesReceiver(t *testing.T, cfg *Config, sink *consumertest.ProfilesSink) *profilesReceiver {
	t.Helper()
	r, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkFullChain asserts that at least 98% of the samples whose leaf is
// chain[0] carry the whole chain, leaf first.
func checkFullChain(t *testing.T, samples []pprofiletest.Sample, chain []string) {
	t.Helper()
	var leafSamples, full int64
	var bad []string
	for _, s := range samples {
		names := s.UserNames()
		if len(names) == 0 || names[0] != chain[0] {
			continue
		}
		leafSamples += s.Count
		if len(names) >= len(chain) && slices.Equal(names[:len(chain)], chain) {
			full += s.Count
		} else if len(bad) < 5 {
			bad = append(bad, shortChain(names))
		}
	}
	if leafSamples < 50 {
		t.Fatalf("only %d samples with leaf %s (of %d samples of the workload)", leafSamples, chain[0], len(samples))
	}
	ratio := float64(full) / float64(leafSamples)
	t.Logf("%d of %d samples in %s carry %v (%.2f%%)", full, leafSamples, chain[0], chain, 100*ratio)
	if ratio < 0.98 {
		t.Fatalf("only %.2f%% of samples in %s carry the full chain; some that don't: %v", 100*ratio, chain[0], bad)
	}
}

func shortChain(names []string) string {
	if len(names) > 6 {
		names = names[:6]
	}
	return "[" + joinNames(names) + "]"
}

func joinNames(names []string) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += " <- "
		}
		out += n
	}
	return out
}

func TestFramelessLeafKeepsCallerC(t *testing.T) {
	bin := testworkload.BuildC(t, "cpuhog.c", "-O2", "-g", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer")
	samples := profileWorkload(t, bin, 3*time.Second)
	checkFullChain(t, samples, []string{"leaf", "middle", "main"})
}

func TestFramelessLeafKeepsCallerGo(t *testing.T) {
	bin := testworkload.BuildGo(t, "gohog")
	samples := profileWorkload(t, bin, 3*time.Second)
	checkFullChain(t, samples, []string{"main.leaf", "main.middle", "main.main"})
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestShutdownReleasesEverything checks that Shutdown is safe without Start,
// and that after Start and Shutdown no file descriptor (BPF program, map,
// link, perf event, opened binary) is left.
func TestShutdownReleasesEverything(t *testing.T) {
	testenv.RequireBPF(t)
	cfg := createDefaultConfig().(*Config)
	never, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := never.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown without start: %v", err)
	}

	before := openFDs(t)
	r, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if during := openFDs(t); during <= before {
		t.Fatalf("%d fds while running, %d before: the sampler holds none?", during, before)
	}
	time.Sleep(300 * time.Millisecond)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d fds after shutdown, %d before", after, before)
	}
}

// TestKernelFramesNamed profiles a workload that lives in read(2) and
// expects the read path by name among its kernel frames, on a
// [kernel.kallsyms]-typed kernel frame.
func TestKernelFramesNamed(t *testing.T) {
	bin := testworkload.BuildC(t, "readzero.c", "-O2")
	samples := profileWorkload(t, bin, 2*time.Second)
	readPath := map[string]bool{"ksys_read": true, "vfs_read": true, "__x64_sys_read": true, "read_zero": true}
	var withKernel, withRead int64
	for _, s := range samples {
		names := s.KernelNames()
		if len(names) == 0 {
			continue
		}
		withKernel += s.Count
		for _, n := range names {
			if readPath[n] {
				withRead += s.Count
				break
			}
		}
	}
	t.Logf("%d samples with kernel frames, %d of them on the read path", withKernel, withRead)
	if withKernel < 20 || withRead < withKernel/2 {
		t.Fatalf("%d of %d kernel samples name the read path", withRead, withKernel)
	}
}
