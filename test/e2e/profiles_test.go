package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// profilesConfig sends ebpfprof profiles to an OTLP/gRPC endpoint. Note it
// sets no feature gate: bpfcol must not need one.
func profilesConfig(endpoint string) string {
	return fmt.Sprintf(`
receivers:
  ebpfprof:
    sampling_frequency: 99
    report_interval: 1s
processors:
  memory_limiter:
    check_interval: 1s
    limit_percentage: 80
    spike_limit_percentage: 20
exporters:
  otlp_grpc:
    endpoint: %s
    tls:
      insecure: true
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprof]
      processors: [memory_limiter]
      exporters: [otlp_grpc]
`, endpoint)
}

// TestCollectorExportsWorkloadChain runs the real bin/bpfcol, exporting real
// OTLP to a gRPC server in the test, and looks for the workload's chain in
// what arrives.
func TestCollectorExportsWorkloadChain(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildGo(t, "gohog")
	server := startProfilesServer(t)
	col := startCollector(t, profilesConfig(server.addr))
	workload := testworkload.Start(t, bin)
	pid := int64(workload.Process.Pid)
	chain := []string{"main.leaf", "main.middle", "main.main"}

	deadline := time.After(60 * time.Second)
	for {
		var found, ofPID int64
		for _, p := range server.all() {
			for _, s := range pprofiletest.Samples(p) {
				if s.PID != pid {
					continue
				}
				ofPID += s.Count
				if s.HasChain(chain) {
					found += s.Count
				}
			}
		}
		if found >= 10 {
			t.Logf("%d of %d samples of pid %d carry %v", found, ofPID, pid, chain)
			return
		}
		if done, err := col.exited(); done {
			t.Fatalf("collector exited: %v\n%s", err, col.output)
		}
		select {
		case <-server.notify:
		case <-time.After(time.Second):
		case <-deadline:
			t.Fatalf("no profile with %v for pid %d within 60s (%d samples of it)\ncollector output:\n%s", chain, pid, ofPID, col.output)
		}
	}
}
