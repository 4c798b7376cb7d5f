package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// validate runs `bpfcol validate --config path` without any --feature-gates
// flag, as a user would, and returns its combined output.
func validate(t *testing.T, bin, path string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "validate", "--config", path).CombinedOutput()
	return string(out), err
}

func TestValidateShippedConfigs(t *testing.T) {
	bin := collectorBinary(t)
	root := repoRoot(t)

	var configs []string
	for _, pattern := range []string{"*.yaml", "*.yml"} {
		matches, err := filepath.Glob(filepath.Join(root, "config", pattern))
		if err != nil {
			t.Fatalf("listing config/%s: %v", pattern, err)
		}
		configs = append(configs, matches...)
	}
	if len(configs) == 0 {
		t.Fatal("no YAML files found in config/")
	}

	for _, path := range configs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			if out, err := validate(t, bin, path); err != nil {
				t.Errorf("bpfcol validate --config %s: %v\n%s", path, err, out)
			}
		})
	}

	// Guards the checks above against a validate that accepts anything.
	t.Run("rejects-invalid-config", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "invalid.yaml")
		const invalid = `receivers:
  ebpfprof:
    sampling_frequency: 0
exporters:
  debug:
service:
  pipelines:
    profiles:
      receivers: [ebpfprof]
      exporters: [debug]
`
		if err := os.WriteFile(path, []byte(invalid), 0o600); err != nil {
			t.Fatalf("writing %s: %v", path, err)
		}
		out, err := validate(t, bin, path)
		if err == nil {
			t.Fatalf("bpfcol validate accepted sampling_frequency: 0\n%s", out)
		}
		if !strings.Contains(out, "sampling_frequency") {
			t.Errorf("bpfcol validate failed without naming sampling_frequency:\n%s", out)
		}
	})
}
