package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// pythonConfig exports ebpfprof profiles over OTLP to endpoint, and as
// pprof files into dir.
func pythonConfig(endpoint, dir string) string {
	return fmt.Sprintf(`
receivers:
  ebpfprof:
    sampling_frequency: 99
    report_interval: 2s
exporters:
  otlp_grpc:
    endpoint: %s
    tls:
      insecure: true
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
      exporters: [otlp_grpc, pprof]
`, endpoint, dir)
}

// crunchChain is crunch.py's hot chain, leaf first, with its lines.
var crunchChain = []struct {
	name string
	line int64
}{{"crunch_leaf", 6}, {"crunch_middle", 9}, {"crunch_outer", 11}}

// hasCrunchChain reports whether a sample's CPython frames start with
// crunchChain, in crunch.py.
func hasCrunchChain(s pprofiletest.Sample) bool {
	var py []pprofiletest.Frame
	for _, f := range s.Frames() {
		if f.Type == conventions.FrameTypeCPython {
			py = append(py, f)
		}
	}
	if len(py) < len(crunchChain) {
		return false
	}
	for i, c := range crunchChain {
		if py[i].Name != c.name || py[i].Line != c.line || filepath.Base(py[i].File) != "crunch.py" {
			return false
		}
	}
	return true
}

// waitChainSamples waits, at most limit, until the OTLP server holds want
// samples of pid for which chain holds, and returns how many samples of
// pid it holds and how many of them chain holds.
func waitChainSamples(t *testing.T, server *profilesServer, col *runningCollector, pid int64, chain func(pprofiletest.Sample) bool, want int64, limit time.Duration) (ofPID, withChain int64) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline) && withChain < want; {
		time.Sleep(time.Second)
		if done, err := col.exited(); done {
			t.Fatalf("collector exited: %v\n%s", err, col.output)
		}
		ofPID, withChain = 0, 0
		for _, p := range server.all() {
			for _, s := range pprofiletest.Samples(p) {
				if s.PID != pid {
					continue
				}
				ofPID += s.Count
				if chain(s) {
					withChain += s.Count
				}
			}
		}
	}
	return ofPID, withChain
}

// TestPythonFramesEndToEnd runs bin/bpfcol while CPython 3.12 runs
// crunch.py, and reads its Python frames back from the OTLP it exports,
// typed cpython with their lines, and from the pprof exporter's file with
// the real `go tool pprof`: -lines shows crunch.py:6 hot.
func TestPythonFramesEndToEnd(t *testing.T) {
	testenv.RequireBPF(t)
	py := testworkload.PyenvPython(t, 12)
	script := testworkload.PythonScript(t, "crunch.py")
	server := startProfilesServer(t)
	dir := filepath.Join(t.TempDir(), "profiles")
	col := startCollector(t, pythonConfig(server.addr, dir))
	workload := testworkload.Start(t, py.Path, script, filepath.Join(t.TempDir(), "truth.txt"))
	pid := int64(workload.Process.Pid)

	ofPID, withChain := waitChainSamples(t, server, col, pid, hasCrunchChain, 50, 60*time.Second)
	t.Logf("OTLP: %d samples of the workload, %d with crunch.py's chain typed cpython, lines right", ofPID, withChain)
	if withChain < 50 {
		t.Fatalf("within 60 s: %d of %d samples over OTLP carry the chain\ncollector output:\n%s", withChain, ofPID, col.output)
	}

	latest := filepath.Join(dir, "latest.pb.gz")
	if _, err := os.Stat(latest); err != nil {
		t.Fatalf("no pprof file: %v", err)
	}
	focus := "-tagfocus=pid=" + strconv.FormatInt(pid, 10)
	top, err := goPprof(t, "-top", "-lines", focus, latest)
	if err != nil {
		t.Fatal(err)
	}
	// "crunch_leaf /tmp/.../crunch.py:6" among the rows, the hottest
	// line of the script.
	hot := regexp.MustCompile(`^crunch_leaf \S*crunch\.py:6$`)
	var hotRow topRow
	var best string
	var bestFlat int64
	for name, row := range parseTop(top) {
		if hot.MatchString(name) {
			hotRow = row
		}
		if strings.Contains(name, "crunch.py:") && row.flat > bestFlat {
			best, bestFlat = name, row.flat
		}
	}
	t.Logf("go tool pprof -lines: crunch.py:6 flat %d cum %d; hottest line of the script %q", hotRow.flat, hotRow.cum, best)
	if hotRow.flat == 0 || !hot.MatchString(best) {
		t.Fatalf("go tool pprof -top -lines does not show crunch_leaf crunch.py:6 as the hottest line of crunch.py:\n%s", top)
	}
	if err := col.stop(); err != nil {
		t.Errorf("stopping the collector: %v", err)
	}
}
