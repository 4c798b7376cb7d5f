package ebpfprofreceiver

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadatatest"
)

// metricPoints returns the data points of the int64 metric name, keyed by
// their attribute set.
func metricPoints(t *testing.T, tt *componenttest.Telemetry, name string) map[attribute.Distinct]metricdata.DataPoint[int64] {
	t.Helper()
	m, err := tt.GetMetric(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	dps, ok := int64Points(m)
	if !ok {
		t.Fatalf("%s is a %T", name, m.Data)
	}
	out := map[attribute.Distinct]metricdata.DataPoint[int64]{}
	for _, dp := range dps {
		out[dp.Attributes.Equivalent()] = dp
	}
	return out
}

// int64Points returns the data points of an int64 sum or gauge.
func int64Points(m metricdata.Metrics) ([]metricdata.DataPoint[int64], bool) {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return d.DataPoints, true
	case metricdata.Gauge[int64]:
		return d.DataPoints, true
	}
	return nil, false
}

// counted is the value of name's point kv, 0 until it is published.
func counted(tt *componenttest.Telemetry, name string, kv ...attribute.KeyValue) int64 {
	m, err := tt.GetMetric(name)
	if err != nil {
		return 0
	}
	dps, _ := int64Points(m)
	want := attribute.NewSet(kv...)
	for _, dp := range dps {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

func point(t *testing.T, points map[attribute.Distinct]metricdata.DataPoint[int64], name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	set := attribute.NewSet(kv...)
	dp, ok := points[set.Equivalent()]
	if !ok {
		t.Fatalf("%s has no point %v", name, kv)
	}
	return dp.Value
}

// TestPipelineStatsPublished profiles a workload whose leaf function pushes
// no frame and checks that what the pipeline counts reaches the receiver's
// self-metrics: frames by outcome, callers put back, the frame-name and
// leaf-function caches.
func TestPipelineStatsPublished(t *testing.T) {
	testenv.RequireBPF(t)
	tt := componenttest.NewTelemetry()
	defer func() { _ = tt.Shutdown(context.Background()) }()
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = 500 * time.Millisecond
	r, err := newProfilesReceiver(metadatatest.NewSettings(tt), cfg, new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	testworkload.Start(t, testworkload.BuildC(t, "cpuhog.c", "-O2", "-g", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer"))

	// Read while running: Shutdown unregisters the callbacks.
	const (
		frames    = "otelcol_ebpfprof_frames_resolved"
		cacheSize = "otelcol_ebpfprof_cache_size"
		evictions = "otelcol_ebpfprof_cache_evictions"
		recovered = "otelcol_ebpfprof_callers_recovered"
		unknown   = "otelcol_ebpfprof_processes_unknown"
		panics    = "otelcol_ebpfprof_parser_panics"
	)
	stack, result := attribute.Key("stack"), attribute.Key("result")
	// Until a report named the workload's frames and put a caller back.
	for deadline := time.Now().Add(30 * time.Second); counted(tt, recovered) == 0 ||
		counted(tt, frames, stack.String("user"), result.String("named")) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no frame named and no caller recovered published within 30 s")
		}
	}
	fp := metricPoints(t, tt, frames)
	userNamed := point(t, fp, frames, stack.String("user"), result.String("named"))
	kernelNamed := point(t, fp, frames, stack.String("kernel"), result.String("named"))
	for _, res := range []string{"unnamed", "unmapped", "unreadable", "skipped", "pending"} {
		point(t, fp, frames, stack.String("user"), result.String(res))
	}
	point(t, fp, frames, stack.String("kernel"), result.String("unnamed"))
	cp := metricPoints(t, tt, cacheSize)
	names := point(t, cp, cacheSize, attribute.String("cache", "frame_names"))
	leaves := point(t, cp, cacheSize, attribute.String("cache", "leaf_functions"))
	kernelNames := point(t, cp, cacheSize, attribute.String("cache", "kernel_names"))
	ep := metricPoints(t, tt, evictions)
	point(t, ep, evictions, attribute.String("cache", "frame_names"))
	point(t, ep, evictions, attribute.String("cache", "leaf_functions"))
	point(t, ep, evictions, attribute.String("cache", "kernel_names"))
	callers := point(t, metricPoints(t, tt, recovered), recovered)
	point(t, metricPoints(t, tt, unknown), unknown)
	// Naming a C workload and the system's libraries meets no parser bug.
	if n := point(t, metricPoints(t, tt, panics), panics); n != 0 {
		t.Errorf("%d parser panics recovered", n)
	}

	t.Logf("frames named: %d user, %d kernel; caches: %d frame names, %d leaf functions; %d callers recovered",
		userNamed, kernelNamed, names, leaves, callers)
	if userNamed == 0 || names == 0 {
		t.Errorf("%d user frames named, %d names cached: the resolver's counts are not published", userNamed, names)
	}
	if kernelNamed > 0 && kernelNames == 0 {
		t.Errorf("%d kernel frames named, none cached: the kernel symbolizer's cache is not published", kernelNamed)
	}
	if leaves == 0 || callers == 0 {
		t.Errorf("%d leaf functions analysed, %d callers recovered: the aggregator's counts are not published", leaves, callers)
	}
}
