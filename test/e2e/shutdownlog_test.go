package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestShutdownLogMatchesRingbufDropMetric reproduces issue 14's frozen
// collector: bin/bpfcol sampling busy CPUs at 1000 Hz is stopped with
// SIGSTOP long enough for its ringbuf to overflow, continued, scraped, and
// terminated. The shutdown log must report at least the ringbuf drops the
// metric reported, and every sample the BPF program recorded as read.
func TestShutdownLogMatchesRingbufDropMetric(t *testing.T) {
	testenv.RequireBPF(t)
	hog := testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...)
	testworkload.Start(t, hog)
	testworkload.Start(t, hog)
	server := startProfilesServer(t)
	cfg := strings.Replace(profilesConfig(server.addr), "sampling_frequency: 99", "sampling_frequency: 1000", 1)
	cfg, url := withPrometheus(t, cfg)
	col := startCollector(t, cfg)

	const taken = `otelcol_ebpfprof_samples_taken(_total)?`
	const ringbufDrops = `otelcol_ebpfprof_samples_dropped(_total)?`
	waitFor := func(what string, ok func(map[string]float64) bool) map[string]float64 {
		t.Helper()
		deadline := time.Now().Add(40 * time.Second)
		for {
			series, err := scrape(t, url)
			if err == nil && ok(series) {
				return series
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s on %s after 40s (%v)\n%s", what, url, err, col.output)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	waitFor("samples taken", func(s map[string]float64) bool { v, _ := metricValue(s, taken); return v > 0 })

	// The ringbuf holds about two seconds of samples of every CPU.
	if err := col.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second)
	if err := col.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	series := waitFor("ringbuf drops", func(s map[string]float64) bool {
		v, _ := metricValue(s, ringbufDrops, `reason="ringbuf_full"`)
		return v > 0
	})
	scraped, _ := metricValue(series, ringbufDrops, `reason="ringbuf_full"`)
	if err := col.stop(); err != nil {
		t.Fatalf("collector did not stop cleanly: %v\n%s", err, col.output)
	}

	f := shutdownFields(t, col.output.String())
	num := func(key string) float64 {
		t.Helper()
		v, ok := f[key].(float64)
		if !ok {
			t.Fatalf("shutdown log has no %s: %v", key, f)
		}
		return v
	}
	t.Logf("ringbuf drops scraped after SIGCONT %.0f; shutdown log: %v", scraped, f)
	if rb := num("samples_dropped_ringbuf_full"); rb < scraped {
		t.Errorf("shutdown log samples_dropped_ringbuf_full %.0f, the metric said %.0f", rb, scraped)
	}
	read := num("samples_read")
	if read != num("samples_taken") {
		t.Errorf("samples_read %.0f, samples_taken %.0f: recorded samples were not read", read, num("samples_taken"))
	}
	if exported, dropped := num("samples_exported"), num("samples_dropped"); read != exported+dropped {
		t.Errorf("samples_read %.0f != samples_exported %.0f + samples_dropped %.0f", read, exported, dropped)
	}
}

// shutdownFields returns the fields of the ebpfprof receiver's shutdown log
// line, which the collector writes as a JSON object after the message.
func shutdownFields(t *testing.T, output string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(output, "\n") {
		if !strings.Contains(line, "ebpfprof receiver stopped") {
			continue
		}
		i := strings.IndexByte(line, '{')
		if i < 0 {
			t.Fatalf("shutdown log line without fields: %s", line)
		}
		f := map[string]any{}
		if err := json.Unmarshal([]byte(line[i:]), &f); err != nil {
			t.Fatalf("parsing the shutdown log line %q: %v", line, err)
		}
		return f
	}
	t.Fatalf("no shutdown log line in the collector's output:\n%s", output)
	return nil
}
