package docs

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/receiver"
	"go.yaml.in/yaml/v3"

	"github.com/bpfcol/bpfcol/exporter/pprofexporter"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver"
	"github.com/bpfcol/bpfcol/receiver/uproberecv"
)

// factory is what an example's component needs: its default config.
type factory interface {
	CreateDefaultConfig() component.Config
}

// ownFactories are the components of this module, by config section and
// type: their examples are checked through their factories here.
func ownFactories() map[string]map[component.Type]factory {
	recv := func(f receiver.Factory) factory { return f }
	exp := func(f exporter.Factory) factory { return f }
	return map[string]map[component.Type]factory{
		"receivers": {
			ebpfprofreceiver.NewFactory().Type(): recv(ebpfprofreceiver.NewFactory()),
			uproberecv.NewFactory().Type():       recv(uproberecv.NewFactory()),
		},
		"exporters": {
			pprofexporter.NewFactory().Type(): exp(pprofexporter.NewFactory()),
		},
	}
}

// otherComponents are the components ocb builds into bin/bpfcol from other
// modules (builder-config.yaml): their factories are not in this module, so
// examples of them are only checked for their shape here.
var otherComponents = map[string][]string{
	"receivers":  {"otlp"},
	"processors": {"memory_limiter"},
	"exporters":  {"debug", "otlp_grpc", "otlp", "otlp_http", "otlphttp"},
	"extensions": {"health_check", "pprof"},
}

// checkExample decodes one YAML example, a whole collector config or a part
// of one, and validates every component config of this module in it as the
// collector does: decoded over the factory's default config, then
// validated field by field. The components its service section names must
// be defined in it or in base, the config the README's parts extend. It
// returns the components it validated.
func checkExample(text string, base map[string]bool) ([]string, error) {
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("empty")
	}
	own := ownFactories()
	defined := maps.Clone(base)
	var checked []string
	for section, v := range raw {
		if section == "service" {
			continue
		}
		if _, known := otherComponents[section]; !known && own[section] == nil {
			return checked, fmt.Errorf("%s: not a collector config section", section)
		}
		comps, ok := v.(map[string]any)
		if !ok {
			return checked, fmt.Errorf("%s: not a mapping", section)
		}
		for idStr, cv := range comps {
			var id component.ID
			if err := id.UnmarshalText([]byte(idStr)); err != nil {
				return checked, fmt.Errorf("%s::%s: %w", section, idStr, err)
			}
			defined[section+"/"+idStr] = true
			f := own[section][id.Type()]
			if f == nil {
				if !slices.Contains(otherComponents[section], id.Type().String()) {
					return checked, fmt.Errorf("%s::%s: no such component in bpfcol", section, idStr)
				}
				continue
			}
			m, _ := cv.(map[string]any)
			cfg := f.CreateDefaultConfig()
			if err := confmap.NewFromStringMap(m).Unmarshal(cfg); err != nil {
				return checked, fmt.Errorf("%s::%s: decoding: %w", section, idStr, err)
			}
			if err := confmap.Validate(cfg); err != nil {
				return checked, fmt.Errorf("%s::%s: %w", section, idStr, err)
			}
			checked = append(checked, section+"/"+idStr)
		}
	}
	return checked, checkService(raw, defined)
}

// definedIn returns the components a config file defines, as
// "section/id".
func definedIn(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	defined := map[string]bool{}
	for section, v := range raw {
		comps, _ := v.(map[string]any)
		for id := range comps {
			defined[section+"/"+id] = true
		}
	}
	return defined
}

// checkService checks that what service names is defined.
func checkService(raw map[string]any, defined map[string]bool) error {
	svc, ok := raw["service"].(map[string]any)
	if !ok {
		return nil
	}
	refs := func(section string, list any) error {
		items, _ := list.([]any)
		for _, it := range items {
			if !defined[section+"/"+fmt.Sprint(it)] {
				return fmt.Errorf("service: %s %v is not defined in the example", section, it)
			}
		}
		return nil
	}
	if err := refs("extensions", svc["extensions"]); err != nil {
		return err
	}
	pipelines, _ := svc["pipelines"].(map[string]any)
	for _, p := range pipelines {
		pm, _ := p.(map[string]any)
		for _, section := range []string{"receivers", "processors", "exporters"} {
			if err := refs(section, pm[section]); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestREADMEConfigExamples loads every ```yaml block of README.md that is a
// collector config or a part of one (receivers, exporters, extensions) and
// validates the configs of bpfcol's own components through their factories.
func TestREADMEConfigExamples(t *testing.T) {
	blocks := fencedBlocks(readme(t), "yaml")
	// The README has users start from config/local.yaml, and its parts
	// add to it.
	base := definedIn(t, filepath.Join(repoRoot(t), "config", "local.yaml"))
	var all []string
	for _, b := range blocks {
		checked, err := checkExample(b.text, base)
		if err != nil {
			t.Errorf("README.md:%d: %v\n%s", b.line, err, b.text)
		}
		t.Logf("README.md:%d: validated %v", b.line, checked)
		all = append(all, checked...)
	}
	// Each of the module's components has an example, so a block the
	// extraction misses (a changed fence) fails here.
	for _, want := range []string{"receivers/ebpfprof", "receivers/uprobe", "exporters/pprof"} {
		if !slices.Contains(all, want) {
			t.Errorf("no README.md yaml example of %s was validated (%d yaml blocks found)", want, len(blocks))
		}
	}
}

// TestCheckExampleRefuses guards the check above against accepting
// anything: an invalid value of each own component fails it, naming the
// field.
func TestCheckExampleRefuses(t *testing.T) {
	for example, field := range map[string]string{
		"receivers:\n  ebpfprof:\n    sampling_frequency: 0\n":                                    "sampling_frequency",
		"receivers:\n  ebpfprof:\n    error_mode: sometimes\n":                                    "error_mode",
		"receivers:\n  uprobe:\n    probes: [{id: a, binary: relative, entry: f}]\n":              "probes[0].binary",
		"receivers:\n  uprobe/x:\n    probes: [{id: a, binary: /bin/true, entry: f}]\n    x: 1\n": "x",
		"exporters:\n  pprof:\n    max_files: 0\n":                                                "max_files",
		"extensions:\n  health_check:\nservice:\n  extensions: [pprof]\n":                         "pprof",
		"receivers:\n  kprobe:\n":                                                                 "kprobe",
	} {
		_, err := checkExample(example, map[string]bool{})
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("checkExample(%q) = %v, want an error naming %s", example, err, field)
		}
	}
}
