package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// pprofConfig writes ebpfprof profiles as pprof files into dir.
func pprofConfig(dir string) string {
	return fmt.Sprintf(`
receivers:
  ebpfprof:
    sampling_frequency: 99
    report_interval: 1s
exporters:
  pprof:
    directory: %s
    max_files: 5
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprof]
      exporters: [pprof]
`, dir)
}

// goPprof runs `go tool pprof` with args and returns its standard output.
func goPprof(t *testing.T, args ...string) (string, error) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, append([]string{"tool", "pprof"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// topRow is one function's line of `pprof -top`.
type topRow struct{ flat, cum int64 }

// topRowLine matches "flat flat% sum% cum cum% name" with integer counts.
var topRowLine = regexp.MustCompile(`^\s*(\d+)\s+\S+%\s+\S+%\s+(\d+)\s+\S+%\s+(.+)$`)

// parseTop returns the rows of `pprof -top` by function name.
func parseTop(out string) map[string]topRow {
	rows := map[string]topRow{}
	for _, line := range strings.Split(out, "\n") {
		m := topRowLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		flat, _ := strconv.ParseInt(m[1], 10, 64)
		cum, _ := strconv.ParseInt(m[2], 10, 64)
		rows[m[3]] = topRow{flat, cum}
	}
	return rows
}

// trace is one sample of `pprof -traces`: its labels and frames, leaf first.
type trace struct {
	labels map[string]string
	frames []string
}

var (
	traceLabel = regexp.MustCompile(`^\s*([A-Za-z0-9_.]+):\s\s(.*)$`)
	traceFrame = regexp.MustCompile(`^\s*(?:\d+\s+)?(\S.*)$`)
)

// parseTraces splits `pprof -traces` output into its samples. The part
// before the first separator is the profile's header.
func parseTraces(out string) []trace {
	var traces []trace
	blocks := strings.Split(out, "-----------+")
	for _, block := range blocks[1:] {
		tr := trace{labels: map[string]string{}}
		for _, line := range strings.Split(block, "\n") {
			if strings.HasPrefix(line, "---") || strings.TrimSpace(line) == "" {
				continue
			}
			if m := traceLabel.FindStringSubmatch(line); m != nil {
				tr.labels[m[1]] = strings.TrimSpace(m[2])
			} else if m := traceFrame.FindStringSubmatch(line); m != nil {
				tr.frames = append(tr.frames, m[1])
			}
		}
		if len(tr.frames) > 0 {
			traces = append(traces, tr)
		}
	}
	return traces
}

// TestPprofExportReadByGoToolPprof runs bin/bpfcol with the ebpfprof
// receiver and the pprof exporter while gohog runs, then reads
// latest.pb.gz with the real `go tool pprof`.
func TestPprofExportReadByGoToolPprof(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildGo(t, "gohog")
	dir := filepath.Join(t.TempDir(), "profiles")
	col := startCollector(t, pprofConfig(dir))
	workload := testworkload.Start(t, bin)
	pid := strconv.Itoa(workload.Process.Pid)
	chain := []string{"main.leaf", "main.middle", "main.main"}
	latest := filepath.Join(dir, "latest.pb.gz")

	deadline := time.Now().Add(60 * time.Second)
	var problem string
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		if done, err := col.exited(); done {
			t.Fatalf("collector exited: %v\n%s", err, col.output)
		}
		if _, err := os.Stat(latest); err != nil {
			problem = "no latest.pb.gz yet"
			continue
		}
		focus := "-tagfocus=pid=" + pid
		top, err := goPprof(t, "-top", focus, latest)
		if err != nil {
			t.Fatal(err)
		}
		rows := parseTop(top)
		leaf, middle, caller := rows[chain[0]], rows[chain[1]], rows[chain[2]]
		if leaf.cum == 0 || middle.cum == 0 || caller.cum == 0 {
			problem = fmt.Sprintf("-top of pid %s lacks one of %v:\n%s", pid, chain, top)
			continue
		}
		// gohog spends its time in leaf's loop; middle and main only call.
		// (No cum ordering: a sample on leaf's first instruction, before
		// its frame exists, unwinds past middle.)
		if leaf.flat <= middle.flat || leaf.flat <= caller.flat {
			t.Fatalf("-top of pid %s: %v = %+v %+v %+v, want leaf the hottest\n%s", pid, chain, leaf, middle, caller, top)
		}

		traces, err := goPprof(t, "-traces", focus, latest)
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, tr := range parseTraces(traces) {
			if tr.labels["pid"] != pid {
				t.Fatalf("-traces %s listed a sample of pid %q:\n%s", focus, tr.labels["pid"], traces)
			}
			if i := slices.Index(tr.frames, chain[0]); i >= 0 && len(tr.frames) >= i+len(chain) && slices.Equal(tr.frames[i:i+len(chain)], chain) {
				found++
				if tr.labels["process"] != filepath.Base(bin) || tr.labels["tid"] == "" {
					t.Errorf("trace with %v has labels %v, want process %s and a tid", chain, tr.labels, filepath.Base(bin))
				}
			}
		}
		if found == 0 {
			problem = fmt.Sprintf("-traces of pid %s has no trace with %v:\n%s", pid, chain, traces)
			continue
		}
		t.Logf("pid %s: -top %v flat/cum %+v %+v %+v; %d traces carry the chain", pid, chain, leaf, middle, caller, found)
		return
	}
	t.Fatalf("within 60s: %s\ncollector output:\n%s", problem, col.output)
}
