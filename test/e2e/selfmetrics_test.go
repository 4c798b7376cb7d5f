package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// scrape fetches the collector's Prometheus endpoint and returns each
// series (name with labels) and its value.
// withPrometheus turns on the collector's detailed self-metrics in cfg (a
// config from profilesConfig) on a Prometheus endpoint, and returns the
// config and the endpoint's URL.
func withPrometheus(t testing.TB, cfg string) (string, string) {
	t.Helper()
	port := freePort(t)
	cfg = strings.Replace(cfg, `  telemetry:
    metrics:
      level: none`, fmt.Sprintf(`  telemetry:
    metrics:
      level: detailed
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d`, port), 1)
	return cfg, fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
}

func scrape(t testing.TB, url string) (map[string]float64, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	series := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series[line[:i]] = v
	}
	return series, nil
}

// metricValue sums the series whose name matches name and whose labels
// contain every label in want (given as `key="value"`).
func metricValue(series map[string]float64, name string, want ...string) (float64, bool) {
	re := regexp.MustCompile(`^` + name + `(\{|$)`)
	var sum float64
	found := false
	for s, v := range series {
		if !re.MatchString(s) {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(s, w) {
				ok = false
			}
		}
		if ok {
			sum += v
			found = true
		}
	}
	return sum, found
}

// TestSelfMetricsOnPrometheusEndpoint runs bin/bpfcol with its telemetry
// on a Prometheus endpoint and reads the receiver's self-metrics from it.
func TestSelfMetricsOnPrometheusEndpoint(t *testing.T) {
	testenv.RequireBPF(t)
	hog := testworkload.BuildC(t, "cpuhog.c", "-O2", "-fno-omit-frame-pointer")
	testworkload.Start(t, hog)
	server := startProfilesServer(t)
	cfg, url := withPrometheus(t, profilesConfig(server.addr))
	col := startCollector(t, cfg)

	deadline := time.Now().Add(40 * time.Second)
	for {
		series, err := scrape(t, url)
		if err == nil {
			taken, _ := metricValue(series, `otelcol_ebpfprof_samples_taken(_total)?`)
			emitted, _ := metricValue(series, `otelcol_ebpfprof_profiles_emitted(_total)?`)
			_, hasDropped := metricValue(series, `otelcol_ebpfprof_samples_dropped(_total)?`, `reason="ringbuf_full"`)
			_, hasLost := metricValue(series, `otelcol_ebpfprof_stacks_lost(_total)?`, `stack="user"`)
			kernelPath, _ := metricValue(series, `otelcol_ebpfprof_kernel_symbolizer`, `path="bpf"`)
			binaries, _ := metricValue(series, `otelcol_ebpfprof_cache_size`, `cache="binaries"`)
			_, hasOutcomes := metricValue(series, `otelcol_ebpfprof_symbolization_outcomes(_total)?`, `outcome="local_hit"`)
			accepted, _ := metricValue(series, `otelcol_receiver_accepted_profile_samples(_total)?`)
			if taken > 0 && emitted >= 2 && hasDropped && hasLost && kernelPath == 1 && binaries > 0 && hasOutcomes && accepted > 0 {
				t.Logf("samples taken %.0f, profiles emitted %.0f, binaries cached %.0f, accepted samples %.0f", taken, emitted, binaries, accepted)
				return
			}
			if time.Now().After(deadline) {
				var names []string
				for s := range series {
					if strings.Contains(s, "ebpfprof") || strings.Contains(s, "receiver_") {
						names = append(names, s)
					}
				}
				t.Fatalf("self-metrics incomplete after 40s: taken=%v emitted=%v dropped=%v lost=%v kernel=%v binaries=%v outcomes=%v accepted=%v\nseries: %v\n%s",
					taken, emitted, hasDropped, hasLost, kernelPath, binaries, hasOutcomes, accepted, names, col.output)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("scraping %s: %v\n%s", url, err, col.output)
		}
		time.Sleep(time.Second)
	}
}
