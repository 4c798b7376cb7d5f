package ebpfprofreceiver

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
)

// TestShutdownLogNamesDropReasonsAsMetric: every reason metadata.yaml
// declares for ebpfprof_samples_dropped has its samples_dropped_REASON
// count in the shutdown log, and the log counts no drop under another
// name (shutdown_timeout, which only a shutdown has, aside).
func TestShutdownLogNamesDropReasonsAsMetric(t *testing.T) {
	raw, err := os.ReadFile("metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var md struct {
		Attributes map[string]struct {
			Enum []string `yaml:"enum"`
		} `yaml:"attributes"`
	}
	if err := yaml.Unmarshal(raw, &md); err != nil {
		t.Fatal(err)
	}
	reasons := md.Attributes["reason"].Enum
	if len(reasons) == 0 {
		t.Fatal("metadata.yaml declares no drop reasons")
	}
	var logged []string
	for _, f := range new(sampleCounts).logFields(profiler.Counters{}, true) {
		if r, ok := strings.CutPrefix(f.Key, "samples_dropped_"); ok && r != "shutdown_timeout" {
			logged = append(logged, r)
		}
	}
	slices.Sort(logged)
	want := slices.Sorted(slices.Values(reasons))
	if !slices.Equal(logged, want) {
		t.Errorf("shutdown log drop reasons %v, metric reasons %v", logged, want)
	}
}
