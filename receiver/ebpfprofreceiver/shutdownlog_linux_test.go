package ebpfprofreceiver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// TestShutdownLogAddsUp profiles a CPU-bound workload into a consumer that
// refuses every other batch, and checks the shutdown log: every sample read
// was exported or dropped for a named reason, and samples_exported counts
// samples (what the accepted profiles weigh), not distinct stacks.
func TestShutdownLogAddsUp(t *testing.T) {
	testenv.RequireBPF(t)
	var (
		mu       sync.Mutex
		calls    int
		accepted int64 // samples in accepted profiles, by their counts
		records  int   // pdata sample records in accepted profiles
	)
	next, err := xconsumer.NewProfiles(func(_ context.Context, p pprofile.Profiles) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls%2 == 0 {
			return errors.New("refused by the test")
		}
		for _, s := range pprofiletest.Samples(p) {
			accepted += s.Count
		}
		records += p.SampleCount()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = 300 * time.Millisecond
	r, err := newProfilesReceiver(set, cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	testworkload.Start(t, testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...))
	time.Sleep(2 * time.Second)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	stopped := logs.FilterMessage("ebpfprof receiver stopped").All()
	if len(stopped) != 1 {
		t.Fatalf("%d shutdown log entries, want 1", len(stopped))
	}
	f := stopped[0].ContextMap()
	num := func(key string) int64 {
		t.Helper()
		switch v := f[key].(type) {
		case int64:
			return v
		case uint64:
			return int64(v)
		}
		t.Fatalf("shutdown log has no %s: %v", key, f)
		return 0
	}
	read, exported, dropped := num("samples_read"), num("samples_exported"), num("samples_dropped")
	reasons := num("samples_dropped_queue") + num("samples_dropped_stacks_full") +
		num("samples_dropped_batch_queue") + num("samples_refused_downstream")
	t.Logf("shutdown log: %v", f)
	if read < 100 {
		t.Fatalf("only %d samples read in 2s of a CPU-bound workload", read)
	}
	if dropped != reasons {
		t.Errorf("samples_dropped %d is not the sum of its reasons, %d", dropped, reasons)
	}
	if read != exported+dropped {
		t.Errorf("samples_read %d != samples_exported %d + samples_dropped %d", read, exported, dropped)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls < 2 || num("samples_refused_downstream") == 0 {
		t.Errorf("%d batches offered, %d samples refused: the refusal path was not taken", calls, num("samples_refused_downstream"))
	}
	if exported != accepted {
		t.Errorf("samples_exported %d, but the accepted profiles weigh %d samples", exported, accepted)
	}
	if int64(records) >= accepted {
		t.Errorf("%d records for %d samples: the workload's identical stacks were not aggregated, the test proves nothing", records, accepted)
	}
}
