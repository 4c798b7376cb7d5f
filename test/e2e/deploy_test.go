package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// deployResource is the part of an OpenTelemetryCollector resource these
// tests check; config is spec.config as the collector reads it.
type deployResource struct {
	path string
	name string
	spec struct {
		Mode              string            `yaml:"mode"`
		UpgradeStrategy   string            `yaml:"upgradeStrategy"`
		NodeSelector      map[string]string `yaml:"nodeSelector"`
		PriorityClassName string            `yaml:"priorityClassName"`
		HostPID           bool              `yaml:"hostPID"`
		Resources         struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		// The CRD's probe fields tune the probes the Operator derives
		// from health_check; they have no handler of their own.
		LivenessProbe  map[string]any `yaml:"livenessProbe"`
		ReadinessProbe map[string]any `yaml:"readinessProbe"`
		Config         map[string]any `yaml:"config"`
	}
}

// deployResources returns every OpenTelemetryCollector resource in deploy/.
func deployResources(t *testing.T) []deployResource {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var found []deployResource
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc struct {
				Kind     string `yaml:"kind"`
				Metadata struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
				Spec yaml.Node `yaml:"spec"`
			}
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("parsing %s: %v", path, err)
			}
			if doc.Kind != "OpenTelemetryCollector" {
				continue
			}
			r := deployResource{path: path, name: doc.Metadata.Name}
			if err := doc.Spec.Decode(&r.spec); err != nil {
				t.Fatalf("%s: decoding spec of %q: %v", path, doc.Metadata.Name, err)
			}
			found = append(found, r)
		}
	}
	if len(found) == 0 {
		t.Fatal("no OpenTelemetryCollector resource found in deploy/*.yaml")
	}
	return found
}

// mapAt walks nested mappings of a collector config; ok is false where a
// key is missing or not a mapping.
func mapAt(m map[string]any, keys ...string) (map[string]any, bool) {
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	return m, true
}

// componentType is the type of a component ID: "otlp_grpc" of "otlp_grpc/logs".
func componentType(id string) string {
	typ, _, _ := strings.Cut(id, "/")
	return typ
}

// healthProbe is the HTTP probe the Operator derives from a health_check
// extension: the extension's path (default /) on its endpoint's port
// (default 13133).
type healthProbe struct {
	id   string // the extension's component ID
	host string // of the endpoint; the kubelet can reach only a pod address
	port int
	path string
}

// derivedHealthProbe returns the probe of the first health_check extension
// enabled in service.extensions, as the Operator would derive it.
func derivedHealthProbe(cfg map[string]any) (healthProbe, error) {
	service, _ := mapAt(cfg, "service")
	enabled, _ := service["extensions"].([]any)
	for _, e := range enabled {
		id, _ := e.(string)
		if componentType(id) != "health_check" {
			continue
		}
		p := healthProbe{id: id, port: 13133, path: "/"}
		exts, _ := mapAt(cfg, "extensions")
		if _, present := exts[id]; !present {
			return p, fmt.Errorf("service.extensions enables %q, which extensions does not configure", id)
		}
		// `health_check:` with no settings decodes as nil: all defaults.
		ext, _ := exts[id].(map[string]any)
		if path, ok := ext["path"].(string); ok && path != "" {
			p.path = path
		}
		p.host = "localhost" // the extension's own default
		if endpoint, ok := ext["endpoint"].(string); ok && endpoint != "" {
			host, port, err := net.SplitHostPort(endpoint)
			if err != nil {
				return p, fmt.Errorf("health_check endpoint %q: %w", endpoint, err)
			}
			if p.port, err = strconv.Atoi(port); err != nil {
				return p, fmt.Errorf("health_check endpoint %q: port: %w", endpoint, err)
			}
			p.host = host
		}
		return p, nil
	}
	return healthProbe{}, errors.New("no health_check extension in service.extensions: the Operator derives no probes")
}

// mebibytes parses a Kubernetes memory quantity in Mi or Gi.
func mebibytes(q string) (int, error) {
	for suffix, scale := range map[string]int{"Mi": 1, "Gi": 1024} {
		if n, ok := strings.CutSuffix(q, suffix); ok {
			v, err := strconv.Atoi(n)
			return v * scale, err
		}
	}
	return 0, fmt.Errorf("memory quantity %q is not in Mi or Gi", q)
}

// TestDeployResources checks what the Operator makes of each resource in
// deploy/: probes through health_check, scheduling as a node agent on the
// architectures the image is built for, no automatic upgrades, memory settings that fit the limit, and
// OTLP/gRPC export.
func TestDeployResources(t *testing.T) {
	for _, r := range deployResources(t) {
		t.Run(filepath.Base(r.path)+"/"+r.name, func(t *testing.T) {
			s := r.spec
			if s.Mode != "daemonset" {
				t.Errorf("mode = %q, want daemonset", s.Mode)
			}
			if !s.HostPID {
				t.Error("hostPID is not true")
			}

			probe, err := derivedHealthProbe(s.Config)
			if err != nil {
				t.Error(err)
			} else {
				switch probe.host {
				case "", "0.0.0.0", "::", "${env:POD_IP}", "${env:MY_POD_IP}":
				default:
					t.Errorf("%s listens on %q, which the kubelet's probes (sent to the pod IP) cannot reach", probe.id, probe.host)
				}
				if !strings.HasPrefix(probe.path, "/") {
					t.Errorf("%s path %q does not start with /", probe.id, probe.path)
				}
			}
			for name, p := range map[string]map[string]any{"livenessProbe": s.LivenessProbe, "readinessProbe": s.ReadinessProbe} {
				if p == nil {
					t.Errorf("spec.%s is not set: tune the derived probe explicitly", name)
					continue
				}
				for _, handler := range []string{"httpGet", "tcpSocket", "exec", "grpc"} {
					if _, ok := p[handler]; ok {
						t.Errorf("spec.%s.%s: the Operator's probe fields have no handler, it comes from health_check", name, handler)
					}
				}
			}

			if got := s.NodeSelector["kubernetes.io/os"]; got != "linux" {
				t.Errorf("nodeSelector kubernetes.io/os = %q, want linux", got)
			}
			// BPF objects of x86-64 and arm64 are committed, and
			// deploy/Dockerfile builds both: a selector on the
			// architecture may only pick one of them.
			if got, ok := s.NodeSelector["kubernetes.io/arch"]; ok && got != "amd64" && got != "arm64" {
				t.Errorf("nodeSelector kubernetes.io/arch = %q: the image is built for amd64 and arm64", got)
			}
			if s.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName = %q, want system-node-critical", s.PriorityClassName)
			}
			if s.UpgradeStrategy != "none" {
				t.Errorf("upgradeStrategy = %q, want none (custom image)", s.UpgradeStrategy)
			}

			limit, err := mebibytes(s.Resources.Limits["memory"])
			if err != nil {
				t.Errorf("resources.limits.memory: %v", err)
			}
			request, err := mebibytes(s.Resources.Requests["memory"])
			if err != nil {
				t.Errorf("resources.requests.memory: %v", err)
			}
			if request > limit {
				t.Errorf("memory request %dMi above the limit %dMi", request, limit)
			}
			checkMemoryLimiter(t, s.Config, limit)

			checkExporters(t, s.Config)
		})
	}
}

// checkMemoryLimiter checks that every memory_limiter acts below the
// container limit, which is also the GOMEMLIMIT the Operator may inject.
func checkMemoryLimiter(t *testing.T, cfg map[string]any, limitMiB int) {
	t.Helper()
	processors, _ := mapAt(cfg, "processors")
	found := false
	for id := range processors {
		if componentType(id) != "memory_limiter" {
			continue
		}
		found = true
		ml, _ := mapAt(processors, id)
		pct, hasPct := ml["limit_percentage"].(int)
		spikePct, _ := ml["spike_limit_percentage"].(int)
		mib, hasMiB := ml["limit_mib"].(int)
		spikeMiB, _ := ml["spike_limit_mib"].(int)
		switch {
		case hasPct && hasMiB:
			t.Errorf("%s sets both limit_percentage and limit_mib", id)
		case hasPct:
			if pct <= 0 || pct >= 100 {
				t.Errorf("%s limit_percentage %d is not below 100%% of the container limit", id, pct)
			}
			if spikePct <= 0 || spikePct >= pct {
				t.Errorf("%s spike_limit_percentage %d is not between 0 and limit_percentage %d", id, spikePct, pct)
			}
		case hasMiB:
			if mib <= 0 || mib >= limitMiB {
				t.Errorf("%s limit_mib %d is not below the container limit %dMi", id, mib, limitMiB)
			}
			if spikeMiB <= 0 || spikeMiB >= mib {
				t.Errorf("%s spike_limit_mib %d is not between 0 and limit_mib %d", id, spikeMiB, mib)
			}
		default:
			t.Errorf("%s sets neither limit_percentage nor limit_mib", id)
		}
	}
	if !found {
		t.Error("no memory_limiter processor")
	}
	pipelines, _ := mapAt(cfg, "service", "pipelines")
	for name := range pipelines {
		p, _ := mapAt(pipelines, name)
		procs, _ := p["processors"].([]any)
		if len(procs) == 0 || componentType(fmt.Sprint(procs[0])) != "memory_limiter" {
			t.Errorf("pipeline %s does not start with memory_limiter: %v", name, procs)
		}
	}
}

// checkExporters checks that the pipelines export with otlp_grpc: Pyroscope
// 2.2.1 rejects the profiles otlp_http sends (README.md, "Backends").
func checkExporters(t *testing.T, cfg map[string]any) {
	t.Helper()
	pipelines, _ := mapAt(cfg, "service", "pipelines")
	if len(pipelines) == 0 {
		t.Fatal("no service.pipelines")
	}
	for name := range pipelines {
		p, _ := mapAt(pipelines, name)
		exporters, _ := p["exporters"].([]any)
		if len(exporters) == 0 {
			t.Errorf("pipeline %s has no exporter", name)
		}
		for _, e := range exporters {
			if typ := componentType(fmt.Sprint(e)); typ != "otlp_grpc" {
				t.Errorf("pipeline %s exports with %s, want otlp_grpc", name, e)
			}
		}
	}
}

// operatorGate matches an Operator feature gate passed on a command line,
// alone or in a list: --feature-gates=operator.x, --feature-gates=+a,operator.x.
var operatorGate = regexp.MustCompile(`feature-gates[= ]\S*\boperator\.`)

// TestDeployDocsOperatorVersion checks that no doc tells users to start the
// Operator with a feature gate (the Operator refuses unknown gates, and
// hostPID needs none), and that the minimum Operator version is stated.
func TestDeployDocsOperatorVersion(t *testing.T) {
	root := repoRoot(t)
	files := []string{filepath.Join(root, "README.md")}
	for _, dir := range []string{"deploy", "docs"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				files = append(files, path)
			}
			return nil
		})
		if err != nil && !(dir == "docs" && errors.Is(err, fs.ErrNotExist)) {
			t.Fatal(err)
		}
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if operatorGate.MatchString(line) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d passes an Operator feature gate: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("v0.142.0")) {
		t.Error("deploy/README.md does not state the minimum Operator version v0.142.0 (spec.hostPID)")
	}
}

// TestDeployHealthReadyAfterReceiversStart runs bin/bpfcol with the
// deploy config, its exporters pointed at OTLP servers in the test and its
// cache in a temporary directory, and polls the Operator's probe endpoint
// from process start: it must answer 503 while the receivers start, and
// its first 200 must come after both receivers logged their start.
func TestDeployHealthReadyAfterReceiversStart(t *testing.T) {
	testenv.RequireBPF(t)
	resources := deployResources(t)
	r := resources[0]
	cfg := r.spec.Config
	probe, err := derivedHealthProbe(cfg)
	if err != nil {
		t.Fatal(err)
	}

	profiles := startProfilesServer(t)
	logs := startLogsServer(t)
	healthPort := freePort(t)
	metricsPort := freePort(t)
	cache := t.TempDir()
	// Redirect what reaches outside the test: the ports (other collectors
	// may run on this host), the hostPath cache, the backends, debuginfod.
	set := func(value any, keys ...string) {
		t.Helper()
		parent, ok := mapAt(cfg, keys[:len(keys)-1]...)
		if !ok {
			t.Fatalf("deploy config has no %s", strings.Join(keys[:len(keys)-1], "."))
		}
		parent[keys[len(keys)-1]] = value
	}
	set(fmt.Sprintf("127.0.0.1:%d", healthPort), "extensions", probe.id, "endpoint")
	set(cache, "receivers", "ebpfprof", "symbolizer", "cache_dir")
	set([]any{}, "receivers", "ebpfprof", "symbolizer", "debuginfod", "urls")
	exporters, _ := mapAt(cfg, "exporters")
	for id := range exporters {
		switch id {
		case "otlp_grpc":
			set(profiles.addr, "exporters", id, "endpoint")
		case "otlp_grpc/logs":
			set(logs.addr, "exporters", id, "endpoint")
		default:
			t.Fatalf("no test endpoint for exporter %s", id)
		}
	}
	set(map[string]any{"metrics": map[string]any{"readers": []any{map[string]any{"pull": map[string]any{
		"exporter": map[string]any{"prometheus": map[string]any{"host": "127.0.0.1", "port": metricsPort}},
	}}}}}, "service", "telemetry")
	for _, id := range []string{"ebpfprof", "uprobe"} {
		if _, ok := mapAt(cfg, "receivers", id); !ok {
			t.Fatalf("deploy config has no %s receiver", id)
		}
	}
	config, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}

	url := fmt.Sprintf("http://127.0.0.1:%d%s", healthPort, probe.path)
	client := &http.Client{Timeout: 2 * time.Second}
	col := startCollector(t, string(config))

	// Poll from process start until the first 200.
	var notReady int
	var ready time.Time // when the first 200 arrived
	deadline := time.Now().Add(60 * time.Second)
	for ready.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered 200 within 60s (%d 503s)\n%s", url, notReady, col.output)
		}
		if done, err := col.exited(); done {
			t.Fatalf("collector exited before it was ready: %v\n%s", err, col.output)
		}
		resp, err := client.Get(url)
		if err != nil {
			// Not listening yet: the extension starts first of all.
			time.Sleep(time.Millisecond)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			ready = time.Now().Round(0)
		case http.StatusServiceUnavailable:
			notReady++
		default:
			t.Fatalf("%s answered %s", url, resp.Status)
		}
		time.Sleep(time.Millisecond)
	}
	if notReady == 0 {
		t.Errorf("%s never answered 503 before the receivers started", url)
	}

	// The start lines may still be in the pipe from the collector.
	started := map[string]time.Time{}
	for wait := time.Now().Add(10 * time.Second); len(started) < 2 && time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		started = receiverStarts(t, col.output.String())
	}
	for _, msg := range []string{"ebpfprof receiver started", "uprobe receiver started"} {
		at, ok := started[msg]
		switch {
		case !ok:
			t.Errorf("no %q log line\n%s", msg, col.output)
		case ready.Before(at):
			t.Errorf("first 200 at %s, before %q at %s", ready.Format(time.RFC3339Nano), msg, at.Format(time.RFC3339Nano))
		default:
			t.Logf("%q at %s; first 200 %s later, after %d 503s", msg, at.Format(time.RFC3339Nano), ready.Sub(at), notReady)
		}
	}

	// Ready stays ready.
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%s answered %s after it was ready", url, resp.Status)
	}
}

// receiverStarts returns when each receiver logged its start, from the
// timestamp (millisecond precision) that leads each console log line.
func receiverStarts(t *testing.T, output string) map[string]time.Time {
	t.Helper()
	found := map[string]time.Time{}
	for _, line := range strings.Split(output, "\n") {
		for _, msg := range []string{"ebpfprof receiver started", "uprobe receiver started"} {
			if !strings.Contains(line, "\t"+msg+"\t") {
				continue
			}
			ts, _, _ := strings.Cut(line, "\t")
			at, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts)
			if err != nil {
				t.Fatalf("log line without a timestamp: %v\n%s", err, line)
			}
			found[msg] = at
		}
	}
	return found
}

// TestDeployPprofExtensionOff checks that no shipped config (config/ and
// the resources in deploy/) enables the pprof extension: it opens a port
// that makes bpfcol do work for anyone who can reach it.
func TestDeployPprofExtensionOff(t *testing.T) {
	configs := map[string]map[string]any{}
	for _, r := range deployResources(t) {
		configs[filepath.Base(r.path)+"/"+r.name] = r.spec.Config
	}
	paths, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			t.Fatalf("parsing %s: %v", path, err)
		}
		configs["config/"+filepath.Base(path)] = cfg
	}
	if len(configs) < 2 {
		t.Fatalf("found only %d shipped configs", len(configs))
	}
	for name, cfg := range configs {
		service, _ := mapAt(cfg, "service")
		enabled, _ := service["extensions"].([]any)
		for _, e := range enabled {
			if componentType(fmt.Sprint(e)) == "pprof" {
				t.Errorf("%s enables the pprof extension", name)
			}
		}
	}
}
