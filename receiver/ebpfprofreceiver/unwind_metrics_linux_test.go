package ebpfprofreceiver

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadatatest"
)

// TestUnwindMetrics runs the receiver over a workload without frame
// pointers and reads the unwind self-metrics: every stop reason is
// published, complete walks are counted, and the loaded tables show in
// the cache size.
func TestUnwindMetrics(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "deepchain.c", noFramePointers...)
	cmd := startWorkload(t, bin)
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { tt.Shutdown(context.Background()) })
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 99
	r, err := newProfilesReceiver(metadatatest.NewSettings(tt), cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	// Until a walk with the workload's tables is counted complete, and
	// the tables show in the cache size.
	deadline := time.Now().Add(30 * time.Second)
	for !r.unwind.Ready(uint32(cmd.Process.Pid)) || !published(tt) {
		if time.Now().After(deadline) {
			t.Fatalf("no complete walk or no loaded table published within 30 s: tables %+v", r.unwind.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}

	stops := sumPoints(t, tt, "otelcol_ebpfprof_unwind_stops", "reason")
	t.Logf("unwind stops: %v", stops)
	for i := profiler.StopReason(0); i < profiler.NumStopReasons; i++ {
		if _, ok := stops[i.String()]; !ok {
			t.Errorf("no data point for reason %q", i)
		}
	}
	if stops["complete"] == 0 {
		t.Error("no walk counted complete")
	}
	caches := gaugePoints(t, tt, "otelcol_ebpfprof_cache_size", "cache")
	t.Logf("caches: %v", caches)
	if caches["unwind_table_bytes"] <= 0 || caches["unwind_tables"] <= 0 || caches["unwind_processes"] <= 0 {
		t.Errorf("loaded unwind tables not in ebpfprof_cache_size: %v", caches)
	}
	if _, err := tt.GetMetric("otelcol_ebpfprof_unwind_table_evictions"); err != nil {
		t.Errorf("evictions not published: %v", err)
	}
	if _, err := tt.GetMetric("otelcol_ebpfprof_unwind_table_compactions"); err != nil {
		t.Errorf("compactions not published: %v", err)
	}
	errs := sumPoints(t, tt, "otelcol_ebpfprof_unwind_errors", "reason")
	t.Logf("unwind errors: %v", errs)
	for _, reason := range []string{"process_load", "table_build", "request_dropped"} {
		if _, ok := errs[reason]; !ok {
			t.Errorf("no data point for unwind error %q", reason)
		}
	}
}

// published says whether a complete walk and the loaded tables show in
// the metrics yet.
func published(tt *componenttest.Telemetry) bool {
	return counted(tt, "otelcol_ebpfprof_unwind_stops", attribute.String("reason", "complete")) > 0 &&
		counted(tt, "otelcol_ebpfprof_cache_size", attribute.String("cache", "unwind_tables")) > 0
}

func sumPoints(t *testing.T, tt *componenttest.Telemetry, name, attr string) map[string]int64 {
	t.Helper()
	m, err := tt.GetMetric(name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value(attributeKey(attr))
		out[v.AsString()] = dp.Value
	}
	return out
}

func gaugePoints(t *testing.T, tt *componenttest.Telemetry, name, attr string) map[string]int64 {
	t.Helper()
	m, err := tt.GetMetric(name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
		v, _ := dp.Attributes.Value(attributeKey(attr))
		out[v.AsString()] = dp.Value
	}
	return out
}

func attributeKey(k string) attribute.Key { return attribute.Key(k) }
