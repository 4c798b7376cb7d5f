package ebpfprofreceiver

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// TestOffCPUPathNamed starts the receiver with off-CPU profiling: the
// off-CPU tests of this package run on whichever path the kernel allows,
// and this one says which, so a kernel without BPF task work is never
// tested quietly in its place (it fails under BPFCOL_REQUIRE_TASK_WORK=1).
// Without task work the receiver warns why.
func TestOffCPUPathNamed(t *testing.T) {
	testenv.RequireBPF(t)
	want := testenv.Has(t, testenv.TaskWork, profiler.CheckOffCPUTaskWork())
	core, logs := observer.New(zap.WarnLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	cfg := createDefaultConfig().(*Config)
	cfg.OffCPU.Enabled = true
	r, err := newProfilesReceiver(set, cfg, new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	got := r.sampler.OffCPUTaskWork()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("off-CPU user stacks walked in task work: %v, the kernel check says %v", got, want)
	}
	warned := logs.FilterMessageSnippet("walked in sched_switch").Len() > 0
	if warned == want {
		t.Errorf("warning that the walk runs in sched_switch logged: %v, with task work: %v", warned, want)
	}
}
