package ebpfprofreceiver

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// TestVDSOFramesNamed profiles a program that spends its time reading the
// clock through the vDSO: its [vdso] frames are named (clock_gettime and
// the vDSO's own helpers), and the mapping carries the vDSO's build-id.
func TestVDSOFramesNamed(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "clockloop.c", "-O2", "-g")
	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	r, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	testworkload.Start(t, bin)
	time.Sleep(4 * time.Second)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var named, unnamed, clock int
	names := map[string]int{}
	for _, frames := range workloadFrames(sink.AllProfiles(), "[vdso]") {
		for _, f := range frames {
			if len(f.lines) == 0 || f.lines[0].function == "" || f.buildID == "" {
				unnamed++
				continue
			}
			named++
			names[f.lines[0].function]++
			if strings.Contains(f.lines[0].function, "clock_gettime") {
				clock++
			}
		}
	}
	t.Logf("[vdso] locations: %d named (with build-id), %d not; names %v", named, unnamed, names)
	if named+unnamed == 0 {
		t.Fatal("no [vdso] frame in the profiles: the workload's clock reads did not go through the vDSO")
	}
	if unnamed > 0 {
		t.Errorf("%d [vdso] locations without a name or build-id", unnamed)
	}
	if clock == 0 {
		t.Errorf("no [vdso] location named clock_gettime: %v", names)
	}
}
