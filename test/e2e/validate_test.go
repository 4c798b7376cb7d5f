package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// validate runs `bpfcol validate --config path` with the extra flags, and
// returns its combined output. Configs of config/ get no flags, as a user
// would run them: bpfcol must not need --feature-gates.
func validate(t *testing.T, bin, path string, flags ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"validate", "--config", path}, flags...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// operatorCollector is the part of an OpenTelemetryCollector resource that
// reaches the collector: its config and its command-line args.
type operatorCollector struct {
	name   string
	config []byte
	flags  []string
}

// operatorCollectors returns every OpenTelemetryCollector resource of a
// (multi-document) YAML file.
func operatorCollectors(path string) ([]operatorCollector, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var found []operatorCollector
	for {
		var doc struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Spec struct {
				Config yaml.Node         `yaml:"config"`
				Args   map[string]string `yaml:"args"`
			} `yaml:"spec"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return found, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", path, err)
		}
		if doc.Kind != "OpenTelemetryCollector" {
			continue
		}
		if doc.Spec.Config.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: OpenTelemetryCollector %q has no spec.config mapping", path, doc.Metadata.Name)
		}
		cfg, err := yaml.Marshal(&doc.Spec.Config)
		if err != nil {
			return nil, fmt.Errorf("%s: encoding spec.config of %q: %w", path, doc.Metadata.Name, err)
		}
		// The operator turns args into --key=value flags.
		var flags []string
		for k, v := range doc.Spec.Args {
			flags = append(flags, "--"+k+"="+v)
		}
		slices.Sort(flags)
		found = append(found, operatorCollector{name: doc.Metadata.Name, config: cfg, flags: flags})
	}
}

// TestValidateDeployConfigs validates the config of every
// OpenTelemetryCollector resource in deploy/, with the resource's args.
func TestValidateDeployConfigs(t *testing.T) {
	bin := collectorBinary(t)
	paths, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, path := range paths {
		cols, err := operatorCollectors(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, col := range cols {
			total++
			t.Run(filepath.Base(path)+"/"+col.name, func(t *testing.T) {
				cfg := filepath.Join(t.TempDir(), "config.yaml")
				if err := os.WriteFile(cfg, col.config, 0o600); err != nil {
					t.Fatal(err)
				}
				if out, err := validate(t, bin, cfg, col.flags...); err != nil {
					t.Errorf("bpfcol validate of spec.config in %s (flags %v): %v\n%s\nconfig:\n%s", path, col.flags, err, out, col.config)
				}
			})
		}
	}
	if total == 0 {
		t.Fatal("no OpenTelemetryCollector resource found in deploy/*.yaml")
	}
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
