package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// scrapedConfig runs both receivers and the pprof exporter, with the
// collector's detailed self-metrics on a Prometheus endpoint at port.
const scrapedConfig = `
receivers:
  ebpfprof:
    sampling_frequency: 99
    report_interval: 1s
  uprobe:
    probes:
      - id: dns
        file_match: '/libc\.so\.6$'
        entry: getaddrinfo
        exit: return
      - id: late
        file_match: '%s$'
        entry: short_call
        exit: return
exporters:
  pprof:
    directory: %s
  debug:
    verbosity: basic
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
    profiles:
      receivers: [ebpfprof]
      exporters: [pprof]
    logs:
      receivers: [uprobe]
      exporters: [debug]
`

// scrapedMetric is one metric family as the Prometheus endpoint shows it.
type scrapedMetric struct {
	kind   string              // # TYPE
	labels map[string][]string // label -> values seen
}

// TestREADMEMetricsScraped runs bin/bpfcol with both receivers and the
// pprof exporter, makes getent resolve names (the uprobe receiver's
// probe) and runs a binary written after start (attached at its exec,
// which records an attach latency), and reads its self-metrics from its
// Prometheus endpoint: every
// metric of bpfcol's components there is in README.md's table with the
// type it shows and only attributes and values the table lists, and every
// metric the table lists is there. TestREADMEMetrics compares the table
// with metadata.yaml; this one with what a running collector emits.
func TestREADMEMetricsScraped(t *testing.T) {
	testenv.RequireBPF(t)
	bin := filepath.Join(repoRoot(t), "bin", "bpfcol")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make build` first (make test does): %v", bin, err)
	}
	getent := testenv.LookPath(t, "getent")
	short := testworkload.BuildC(t, "shortcalls.c", "-O2")
	port := freePort(t)
	dir := t.TempDir()
	late := filepath.Join(dir, "late")
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, scrapedConfig, regexp.QuoteMeta(late), filepath.Join(dir, "profiles"), port), 0o600); err != nil {
		t.Fatal(err)
	}
	out := new(lockedBuffer)
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("bin/bpfcol's output:\n%s", out.String())
		}
	}()
	documented := documentedMetrics(t)
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	// Until every documented metric is there: some are registered by a
	// receiver's first report or first attach.
	var scraped map[string]scrapedMetric
	deadline := time.Now().Add(60 * time.Second)
	for {
		_ = exec.Command(getent, "ahosts", "localhost").Run()
		if _, err := os.Stat(late); err != nil && strings.Contains(out.String(), "uprobe receiver started") {
			data, err := os.ReadFile(short)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(late, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_ = exec.Command(late, "1").Run()
		var err error
		scraped, err = scrapeMetrics(url)
		if err == nil && len(missingMetrics(documented, scraped)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s, README.md's metrics not emitted by bin/bpfcol: %v (scrape: %v)", missingMetrics(documented, scraped), err)
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("bin/bpfcol exited: %v", err)
		case <-time.After(time.Second):
		}
	}
	for name, m := range scraped {
		d, ok := documented[name]
		if !ok {
			t.Errorf("bin/bpfcol emits %s, which README.md's self-metrics table does not list", name)
			continue
		}
		if m.kind != d.kind {
			t.Errorf("%s: bin/bpfcol emits a %s, README.md says %s", name, m.kind, d.kind)
		}
		for label, values := range m.labels {
			want, ok := d.attrs[label]
			if !ok {
				t.Errorf("%s: bin/bpfcol emits attribute %s, which README.md does not list (it lists %v)", name, label, slices.Sorted(maps.Keys(d.attrs)))
				continue
			}
			for _, v := range values {
				if !slices.Contains(want, v) {
					t.Errorf("%s: bin/bpfcol emits %s=%q, which README.md does not list (%v)", name, label, v, want)
				}
			}
		}
	}
	t.Logf("%d metrics of bpfcol's components emitted, all in README.md's table", len(scraped))
}

// documentedMetrics returns README.md's self-metrics, each with its type
// (counter, gauge, histogram) and attribute values.
func documentedMetrics(t *testing.T) map[string]declaredMetric {
	t.Helper()
	out := map[string]declaredMetric{}
	for _, row := range tableRows(t, section(t, readme(t), "Self-metrics"), "Metric") {
		spans := codeSpans(row[0])
		if len(spans) != 1 || len(row) < 3 {
			t.Fatalf("row %q: want one `metric` and Type, Attributes cells", row)
		}
		kind, _, _ := strings.Cut(row[1], " ")
		out[spans[0]] = declaredMetric{kind: kind, attrs: docAttrs(row[2])}
	}
	if len(out) == 0 {
		t.Fatal("README.md's self-metrics table lists no metric")
	}
	return out
}

func missingMetrics(documented map[string]declaredMetric, scraped map[string]scrapedMetric) []string {
	var missing []string
	for name := range documented {
		if _, ok := scraped[name]; !ok {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	return missing
}

// ownMetric matches the self-metrics of bpfcol's own components, as the
// Prometheus exporter names them: otelcol_ prefix, _total on counters,
// _bucket/_sum/_count series of histograms.
var ownMetric = regexp.MustCompile(`^otelcol_((?:ebpfprof|uprobe|pprof)_[a-z0-9_]+?)(_total|_bucket|_sum|_count)?(\{.*\})? `)

// scrapeMetrics reads the Prometheus text at url: bpfcol's own metric
// families, with their type and the label values of their series.
func scrapeMetrics(url string) (map[string]scrapedMetric, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	types := map[string]string{}
	out := map[string]scrapedMetric{}
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		m := ownMetric.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		fam := "otelcol_" + name
		if m[2] == "_total" {
			fam += "_total"
		}
		kind := types[fam]
		if kind == "" {
			kind = types["otelcol_"+name]
		}
		sm, ok := out[name]
		if !ok {
			sm = scrapedMetric{kind: kind, labels: map[string][]string{}}
		}
		for _, l := range label.FindAllStringSubmatch(m[3], -1) {
			switch l[1] {
			case "le", "otel_scope_name", "otel_scope_version", "otel_scope_schema_url":
				continue
			}
			if !slices.Contains(sm.labels[l[1]], l[2]) {
				sm.labels[l[1]] = append(sm.labels[l[1]], l[2])
			}
		}
		out[name] = sm
	}
	return out, sc.Err()
}

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
