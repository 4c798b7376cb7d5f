package ebpfprofreceiver

import (
	"context"
	"errors"
	"os/exec"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadatatest"
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
	var atStop profiler.Counters
	r.hooks.afterStop = func() {
		if atStop, err = r.sampler.Counters(); err != nil {
			t.Errorf("sampler counters once stopped: %v", err)
		}
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	testworkload.Start(t, testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...))
	time.Sleep(2 * time.Second)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	f := shutdownLog(t, logs)
	num := func(key string) int64 { t.Helper(); return logNum(t, f, key) }
	read, exported, dropped := num("samples_read"), num("samples_exported"), num("samples_dropped")
	reasons := num("samples_dropped_queue_full") + num("samples_dropped_stack_table_full") +
		num("samples_dropped_batch_queue_full") + num("samples_dropped_export_refused")
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
	// Every sample the BPF program recorded was read, the ones still in
	// the ringbuf at stop included, and the log shows the sampler's own
	// counters as they were once sampling stopped.
	if taken := num("samples_taken"); read != taken || taken != int64(atStop.Samples) {
		t.Errorf("samples_read %d, samples_taken %d, the sampler recorded %d", read, taken, atStop.Samples)
	}
	if rb := num("samples_dropped_ringbuf_full"); rb != int64(atStop.DroppedRingbuf) {
		t.Errorf("samples_dropped_ringbuf_full %d, the sampler counted %d", rb, atStop.DroppedRingbuf)
	}
	if n := num("samples_dropped_shutdown_timeout"); n != 0 {
		t.Errorf("samples_dropped_shutdown_timeout %d without a shutdown deadline", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls < 2 || num("samples_dropped_export_refused") == 0 {
		t.Errorf("%d batches offered, %d samples refused: the refusal path was not taken", calls, num("samples_dropped_export_refused"))
	}
	if exported != accepted {
		t.Errorf("samples_exported %d, but the accepted profiles weigh %d samples", exported, accepted)
	}
	if int64(records) >= accepted {
		t.Errorf("%d records for %d samples: the workload's identical stacks were not aggregated, the test proves nothing", records, accepted)
	}
}

// TestShutdownLogAddsUpOffCPU profiles a shell sleeping in a loop with
// off_cpu on at probability 1: off-CPU events are samples read from the
// same ringbuf, so samples_taken (and its metric) counts them with the CPU
// samples, and samples_taken = samples_read still holds in the log.
func TestShutdownLogAddsUpOffCPU(t *testing.T) {
	testenv.RequireBPF(t)
	tt := componenttest.NewTelemetry()
	defer func() { _ = tt.Shutdown(context.Background()) }()
	core, logs := observer.New(zapcore.InfoLevel)
	set := metadatatest.NewSettings(tt)
	set.Logger = zap.New(core)
	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = 300 * time.Millisecond
	cfg.OffCPU = OffCPUConfig{Enabled: true, MinDuration: time.Millisecond, Probability: 1}
	r, err := newProfilesReceiver(set, cfg, new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	var atStop profiler.Counters
	var takenMetric int64
	r.hooks.afterStop = func() {
		if atStop, err = r.sampler.Counters(); err != nil {
			t.Errorf("sampler counters once stopped: %v", err)
		}
		takenMetric = point(t, metricPoints(t, tt, "otelcol_ebpfprof_samples_taken"), "samples_taken")
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.05; done")
	if out, err := sleeper.CombinedOutput(); err != nil {
		t.Errorf("sleeping shell: %v: %s", err, out)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	f := shutdownLog(t, logs)
	num := func(key string) int64 { t.Helper(); return logNum(t, f, key) }
	t.Logf("sampler at stop: %d CPU samples, %d off-CPU events; shutdown log: %v", atStop.Samples, atStop.OffCPUEvents, f)
	if atStop.OffCPUEvents == 0 {
		t.Fatal("no off-CPU event recorded while a shell slept ten times: the test proves nothing")
	}
	read, exported, dropped := num("samples_read"), num("samples_exported"), num("samples_dropped")
	if read != exported+dropped {
		t.Errorf("samples_read %d != samples_exported %d + samples_dropped %d", read, exported, dropped)
	}
	want := int64(atStop.Samples + atStop.OffCPUEvents)
	if taken := num("samples_taken"); taken != read || taken != want {
		t.Errorf("samples_taken %d, samples_read %d; the sampler recorded %d CPU samples and %d off-CPU events",
			taken, read, atStop.Samples, atStop.OffCPUEvents)
	}
	if takenMetric != want {
		t.Errorf("ebpfprof_samples_taken %d at stop; the sampler recorded %d CPU samples and %d off-CPU events",
			takenMetric, atStop.Samples, atStop.OffCPUEvents)
	}
}

// shutdownLog returns the fields of the one "ebpfprof receiver stopped" entry.
func shutdownLog(t *testing.T, logs *observer.ObservedLogs) map[string]any {
	t.Helper()
	stopped := logs.FilterMessage("ebpfprof receiver stopped").All()
	if len(stopped) != 1 {
		t.Fatalf("%d shutdown log entries, want 1", len(stopped))
	}
	return stopped[0].ContextMap()
}

func logNum(t *testing.T, f map[string]any, key string) int64 {
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

// TestShutdownLogCountsRingbufDrops reproduces a frozen collector: the
// drain is held back while busy workloads fill a 64 KiB ringbuf at
// 1000 Hz, so the BPF program drops samples. The shutdown log must report
// the drops the self-metric reports, and every sample left in the ringbuf
// at stop must be read and delivered.
func TestShutdownLogCountsRingbufDrops(t *testing.T) {
	testenv.RequireBPF(t)
	tt := componenttest.NewTelemetry()
	defer func() { _ = tt.Shutdown(context.Background()) }()
	core, logs := observer.New(zapcore.InfoLevel)
	set := metadatatest.NewSettings(tt)
	set.Logger = zap.New(core)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 1000
	cfg.ReportInterval = 300 * time.Millisecond
	sink := new(consumertest.ProfilesSink)
	r, err := newProfilesReceiver(set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	r.hooks.ringBufferBytes = 64 << 10
	r.hooks.drainStart = held
	scrape := func() (taken, ringbufDrops int64) {
		t.Helper()
		taken = point(t, metricPoints(t, tt, "otelcol_ebpfprof_samples_taken"), "samples_taken")
		ringbufDrops = point(t, metricPoints(t, tt, "otelcol_ebpfprof_samples_dropped"), "samples_dropped",
			attribute.String("reason", "ringbuf_full"))
		return taken, ringbufDrops
	}
	var takenAtStop, dropsAtStop int64
	r.hooks.afterStop = func() {
		// Sampling stopped with the ringbuf full; the metrics are still
		// registered. Then let the drain read what is left.
		takenAtStop, dropsAtStop = scrape()
		close(held)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	hog := testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...)
	for range r.sampler.CPUs() {
		testworkload.Start(t, hog)
	}
	time.Sleep(1500 * time.Millisecond)
	_, dropsRunning := scrape()
	if dropsRunning == 0 {
		t.Fatal("no ringbuf drops while the drain was held: the test reproduces nothing")
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	f := shutdownLog(t, logs)
	num := func(key string) int64 { t.Helper(); return logNum(t, f, key) }
	t.Logf("ringbuf drops scraped while running %d, at stop %d; shutdown log: %v", dropsRunning, dropsAtStop, f)
	if rb := num("samples_dropped_ringbuf_full"); rb < dropsRunning || rb != dropsAtStop {
		t.Errorf("shutdown log samples_dropped_ringbuf_full %d; the metric said %d while running and %d at stop", rb, dropsRunning, dropsAtStop)
	}
	read, taken := num("samples_read"), num("samples_taken")
	if taken != takenAtStop || read != taken {
		t.Errorf("samples_read %d, samples_taken %d, the metric said %d taken at stop: samples left in the ringbuf were not read", read, taken, takenAtStop)
	}
	if read == 0 {
		t.Fatal("no sample read: the samples left in the ringbuf at stop were lost")
	}
	exported, dropped := num("samples_exported"), num("samples_dropped")
	if read != exported+dropped {
		t.Errorf("samples_read %d != samples_exported %d + samples_dropped %d", read, exported, dropped)
	}
	var delivered int64
	for _, p := range sink.AllProfiles() {
		for _, s := range pprofiletest.Samples(p) {
			delivered += s.Count
		}
	}
	if delivered != exported {
		t.Errorf("the consumer got %d samples, the log says %d exported", delivered, exported)
	}
}

// TestShutdownDeadlineCountsUndelivered blocks the consumer, so the pipeline
// cannot finish before Shutdown's deadline: Shutdown must say so, and the
// samples read but not delivered must be counted as dropped at shutdown.
func TestShutdownDeadlineCountsUndelivered(t *testing.T) {
	testenv.RequireBPF(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	next, err := xconsumer.NewProfiles(func(context.Context, pprofile.Profiles) error {
		once.Do(func() { close(entered) })
		<-release
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
	cfg.ReportInterval = 200 * time.Millisecond
	r, err := newProfilesReceiver(set, cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	testworkload.Start(t, testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...))
	select {
	case <-entered:
	case <-time.After(60 * time.Second):
		t.Fatal("no profiles offered to the consumer in 60s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = r.Shutdown(ctx)
	unblock()
	r.wg.Wait() // the pipeline ends once the consumer returns
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a blocked consumer: %v, want the deadline exceeded", err)
	}
	if n := logs.FilterMessageSnippet("did not stop before the shutdown deadline").Len(); n != 1 {
		t.Errorf("%d log lines say the pipeline did not stop in time, want 1", n)
	}
	f := shutdownLog(t, logs)
	num := func(key string) int64 { t.Helper(); return logNum(t, f, key) }
	t.Logf("shutdown log: %v", f)
	read, exported, dropped := num("samples_read"), num("samples_exported"), num("samples_dropped")
	undelivered := num("samples_dropped_shutdown_timeout")
	if undelivered == 0 {
		t.Error("samples_dropped_shutdown_timeout 0 while the consumer held a batch")
	}
	reasons := num("samples_dropped_queue_full") + num("samples_dropped_stack_table_full") +
		num("samples_dropped_batch_queue_full") + num("samples_dropped_export_refused") + undelivered
	if dropped != reasons {
		t.Errorf("samples_dropped %d is not the sum of its reasons, %d", dropped, reasons)
	}
	if read != exported+dropped {
		t.Errorf("samples_read %d != samples_exported %d + samples_dropped %d", read, exported, dropped)
	}
}
