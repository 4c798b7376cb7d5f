package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// uprobeConfig times the C workload's scoped_sleep and sends the records
// to an OTLP/gRPC logs endpoint.
func uprobeConfig(bin, endpoint string, metricsPort int) string {
	return fmt.Sprintf(`
receivers:
  uprobe:
    probes:
      - id: scoped_sleep
        binary: %s
        entry: scoped_sleep
        exit: return
        min_duration: 500us
exporters:
  otlp_grpc:
    endpoint: %s
    tls:
      insecure: true
service:
  telemetry:
    metrics:
      level: detailed
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
  pipelines:
    logs:
      receivers: [uprobe]
      exporters: [otlp_grpc]
`, bin, endpoint, metricsPort)
}

// TestCollectorExportsScopeRecords runs bin/bpfcol with the uprobe receiver
// and checks that one record per outermost call of the workload arrives at
// a real OTLP logs server.
func TestCollectorExportsScopeRecords(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "scopesleep.c", "-O2", "-fno-omit-frame-pointer", "-pthread")
	server := startLogsServer(t)
	port := freePort(t)
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	col := startCollector(t, uprobeConfig(bin, server.addr, port))
	// Wait for the receiver to be up before the workload starts its calls.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(col.output.String(), "uprobe receiver started") {
		if done, err := col.exited(); done {
			t.Fatalf("collector exited: %v\n%s", err, col.output)
		}
		if time.Now().After(deadline) {
			t.Fatalf("uprobe receiver did not start\n%s", col.output)
		}
		time.Sleep(50 * time.Millisecond)
	}
	dir := t.TempDir()
	start, out := filepath.Join(dir, "start"), filepath.Join(dir, "out")
	w := testworkload.Start(t, bin, start, out, "1")
	// The receiver attaches to the binary when it sees the process exec.
	for !strings.Contains(col.output.String(), "attached uprobes") {
		if time.Now().After(deadline) {
			t.Fatalf("workload never probed\n%s", col.output)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// While the workload runs its binary has uprobes, and the receiver's
	// self-metrics say so.
	series, err := scrape(t, metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := metricValue(series, `otelcol_uprobe_uprobes_attached`); v < 2 {
		t.Errorf("uprobe_uprobes_attached = %v while the workload is probed", v)
	}
	if v, _ := metricValue(series, `otelcol_uprobe_binaries_attached`); v < 1 {
		t.Errorf("uprobe_binaries_attached = %v while the workload is probed", v)
	}
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	calls := strings.Count(string(data), "call ")
	pid := int64(w.Process.Pid)

	var got int
	until := time.After(30 * time.Second)
	for got < calls {
		got = 0
		for _, l := range server.all() {
			for i := 0; i < l.ResourceLogs().Len(); i++ {
				rl := l.ResourceLogs().At(i)
				p, ok := rl.Resource().Attributes().Get("process.pid")
				if !ok || p.Int() != pid {
					continue
				}
				for j := 0; j < rl.ScopeLogs().Len(); j++ {
					recs := rl.ScopeLogs().At(j).LogRecords()
					for k := 0; k < recs.Len(); k++ {
						if recs.At(k).Body().Str() != "scoped_sleep" {
							t.Fatalf("record body %q", recs.At(k).Body().Str())
						}
						got++
					}
				}
			}
		}
		select {
		case <-server.notify:
		case <-time.After(time.Second):
		case <-until:
			t.Fatalf("%d of %d records arrived\n%s", got, calls, col.output)
		}
	}
	if got != calls {
		t.Fatalf("%d records for %d outermost calls", got, calls)
	}
	t.Logf("%d records for %d outermost calls arrived over OTLP", got, calls)

	series, err = scrape(t, metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := metricValue(series, `otelcol_uprobe_records_emitted(_total)?`); v < float64(calls) {
		t.Errorf("uprobe_records_emitted = %v, want at least %d", v, calls)
	}
	if v, ok := metricValue(series, `otelcol_uprobe_records_lost(_total)?`, `reason="ringbuf_full"`); !ok || v != 0 {
		t.Errorf("uprobe_records_lost{ringbuf_full} = %v (present %v), want 0", v, ok)
	}
	if _, ok := metricValue(series, `otelcol_uprobe_ringbuf_drops(_total)?`, `ringbuf="process_events"`); !ok {
		t.Error("uprobe_ringbuf_drops{process_events} missing")
	}
	if v, _ := metricValue(series, `otelcol_uprobe_binaries_evaluated(_total)?`); v < 1 {
		t.Errorf("uprobe_binaries_evaluated = %v", v)
	}
}
