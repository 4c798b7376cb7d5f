package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// scopeProfilesConfig runs both receivers in one collector, each signal to
// its own OTLP/gRPC server.
func scopeProfilesConfig(bin, profilesAddr, logsAddr, pprofDir string) string {
	return fmt.Sprintf(`
receivers:
  ebpfprof:
    sampling_frequency: 200
    report_interval: 1s
    off_cpu:
      enabled: true
      probability: 1
  uprobe:
    probes:
      - id: scoped
        binary: %s
        entry: scoped_call
        exit: return
exporters:
  otlp_grpc/profiles:
    endpoint: %s
    tls:
      insecure: true
  otlp_grpc/logs:
    endpoint: %s
    tls:
      insecure: true
  pprof:
    directory: %s
    max_files: 100
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprof]
      exporters: [otlp_grpc/profiles, pprof]
    logs:
      receivers: [uprobe]
      exporters: [otlp_grpc/logs]
`, bin, profilesAddr, logsAddr, pprofDir)
}

// TestCollectorScopeProfiles runs bin/bpfcol with both receivers on a C
// workload whose probed function burns CPU and sleeps, and checks that the
// span id of every log record that arrives is the link of profile samples
// that arrive, on-CPU and off-CPU, and that every linked sample names a
// record that arrived. In the pprof files the collector writes, `go tool
// pprof -tagfocus=span_id=...` keeps the samples of that one call.
func TestCollectorScopeProfiles(t *testing.T) {
	testenv.RequireBPF(t)
	const calls = 10
	bin := testworkload.BuildC(t, "scopeburn.c", "-O1", "-g", "-fno-omit-frame-pointer")
	profiles, logs := startProfilesServer(t), startLogsServer(t)
	pprofDir := t.TempDir()
	col := startCollector(t, scopeProfilesConfig(bin, profiles.addr, logs.addr, pprofDir))
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(col.output.String(), "uprobe receiver started") || !strings.Contains(col.output.String(), "ebpfprof receiver started") {
		if done, err := col.exited(); done {
			t.Fatalf("collector exited: %v\n%s", err, col.output)
		}
		if time.Now().After(deadline) {
			t.Fatalf("receivers did not start\n%s", col.output)
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := filepath.Join(t.TempDir(), "start")
	w := testworkload.Start(t, bin, start, fmt.Sprint(calls))
	pid := int64(w.Process.Pid)
	// The calls start once the workload's stacks are walked with its
	// files' unwind tables: a stack of its wait for the start file
	// (nanosleep through libc, whose code keeps no frame pointers) that
	// reaches _start.
	for waited := false; !waited; time.Sleep(50 * time.Millisecond) {
		if done, err := col.exited(); done {
			t.Fatalf("collector exited: %v\n%s", err, col.output)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stack of the waiting workload reached _start\n%s", col.output)
		}
		for _, p := range profiles.all() {
			for _, s := range pprofiletest.Samples(p) {
				names := s.UserNames()
				if s.PID == pid && slices.Contains(names, "nap") && len(names) > 0 && names[len(names)-1] == "_start" {
					waited = true
				}
			}
		}
	}
	if err := os.WriteFile(start, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}

	// spans: span id -> kinds of samples linked to it.
	var spans map[string]map[string]int64
	var records int
	var unknown []string
	for time.Now().Before(deadline) {
		spans, records, unknown = map[string]map[string]int64{}, 0, nil
		for _, l := range logs.all() {
			for i := 0; i < l.ResourceLogs().Len(); i++ {
				sls := l.ResourceLogs().At(i).ScopeLogs()
				for j := 0; j < sls.Len(); j++ {
					lrs := sls.At(j).LogRecords()
					for k := 0; k < lrs.Len(); k++ {
						if lrs.At(k).Body().Str() == "scoped" {
							spans[lrs.At(k).SpanID().String()] = map[string]int64{}
							records++
						}
					}
				}
			}
		}
		for _, p := range profiles.all() {
			for _, s := range pprofiletest.Samples(p) {
				if s.PID != pid || s.SpanID == "" {
					continue
				}
				if kinds, ok := spans[s.SpanID]; ok {
					kinds[s.SampleType] += s.Count
				} else {
					unknown = append(unknown, s.SpanID)
				}
			}
		}
		complete := records == calls
		for _, kinds := range spans {
			complete = complete && len(kinds) == 2
		}
		if complete {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if records != calls {
		t.Fatalf("%d log records arrived, want %d", records, calls)
	}
	for span, kinds := range spans {
		t.Logf("span %s: %v", span, kinds)
		if kinds["samples/count"] == 0 || kinds["off_cpu/nanoseconds"] == 0 {
			t.Errorf("span %s of a log record: linked samples %v, want on-CPU and off-CPU ones", span, kinds)
		}
	}
	if len(unknown) > 0 {
		t.Errorf("samples linked to spans of no log record that arrived: %v", unknown)
	}

	// One call's samples in pprof: every trace -tagfocus keeps is in the
	// probed function and carries the call's span id.
	var span string
	for sp := range spans {
		span = sp
		break
	}
	files, err := filepath.Glob(filepath.Join(pprofDir, "profile-*.pb.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pprof files in %s: %v", pprofDir, err)
	}
	var traces int
	for _, f := range files {
		out, err := goPprof(t, "-traces", "-sample_index=samples", "-tagfocus=span_id="+span, f)
		if err != nil {
			continue // no sample of the call in this file
		}
		for _, tr := range strings.Split(out, "-----------+-------------------------------------------------------")[1:] {
			if strings.TrimSpace(tr) == "" {
				continue
			}
			traces++
			if !strings.Contains(tr, "scoped_call") || !strings.Contains(tr, span) {
				t.Errorf("-tagfocus=span_id=%s kept a trace of another call or of none:\n%s", span, tr)
			}
		}
	}
	t.Logf("span %s: %d pprof traces in %d files", span, traces, len(files))
	if traces == 0 {
		t.Errorf("-tagfocus=span_id=%s kept no on-CPU sample in %d pprof files", span, len(files))
	}
}
