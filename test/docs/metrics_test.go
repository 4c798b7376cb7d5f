package docs

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// metadataFile is the part of an mdatagen metadata.yaml that declares
// self-metrics.
type metadataFile struct {
	Attributes map[string]struct {
		NameOverride string   `yaml:"name_override"`
		Enum         []string `yaml:"enum"`
	} `yaml:"attributes"`
	Telemetry struct {
		Metrics map[string]struct {
			Attributes []string `yaml:"attributes"`
			Sum        *struct {
				Monotonic bool `yaml:"monotonic"`
			} `yaml:"sum"`
			Gauge     *struct{} `yaml:"gauge"`
			Histogram *struct{} `yaml:"histogram"`
		} `yaml:"metrics"`
	} `yaml:"telemetry"`
}

// declaredMetric is a metric as metadata.yaml declares it.
type declaredMetric struct {
	kind string
	// attrs maps each attribute's name, as exported, to its values.
	attrs map[string][]string
}

// readMetadata returns the self-metrics of the components' metadata.yaml
// files. Every metric a receiver registers goes through the telemetry
// builder mdatagen generates from them.
func readMetadata(t *testing.T) map[string]declaredMetric {
	t.Helper()
	metrics := map[string]declaredMetric{}
	for _, dir := range []string{"receiver/ebpfprofreceiver", "receiver/uproberecv", "exporter/pprofexporter"} {
		path := filepath.Join(repoRoot(t), dir, "metadata.yaml")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var md metadataFile
		if err := yaml.Unmarshal(data, &md); err != nil {
			t.Fatalf("parsing %s: %v", path, err)
		}
		for name, m := range md.Telemetry.Metrics {
			d := declaredMetric{attrs: map[string][]string{}}
			switch {
			case m.Sum != nil && m.Sum.Monotonic:
				d.kind = "counter"
			case m.Sum != nil:
				d.kind = "updowncounter"
			case m.Gauge != nil:
				d.kind = "gauge"
			case m.Histogram != nil:
				d.kind = "histogram"
			}
			for _, a := range m.Attributes {
				attr := md.Attributes[a]
				key := a
				if attr.NameOverride != "" {
					key = attr.NameOverride
				}
				d.attrs[key] = attr.Enum
			}
			metrics[name] = d
		}
	}
	return metrics
}

// partialValues are the metrics whose README row rightly lists only some
// of their attribute's enum: the code observes no other value.
var partialValues = map[string]string{
	// telemetry.go observes evictions of the five caches that evict by
	// LRU; the unwind tables have ebpfprof_unwind_table_evictions.
	"ebpfprof_cache_evictions": "cache",
}

// docAttrs parses an Attributes cell: "`key`: `v1`, `v2`; `key2`: `v3`".
func docAttrs(cell string) map[string][]string {
	attrs := map[string][]string{}
	if cell == "" {
		return attrs
	}
	for part := range strings.SplitSeq(cell, ";") {
		key, values, _ := strings.Cut(part, ":")
		k := codeSpans(key)
		if len(k) != 1 {
			attrs[strings.TrimSpace(part)] = nil
			continue
		}
		attrs[k[0]] = codeSpans(values)
	}
	return attrs
}

// TestREADMEMetrics checks README.md's self-metrics table against the
// metadata.yaml files: the same metrics, each with its type, attributes
// and attribute values.
func TestREADMEMetrics(t *testing.T) {
	declared := readMetadata(t)
	if len(declared) == 0 {
		t.Fatal("no metric found in the metadata.yaml files")
	}
	rows := tableRows(t, section(t, readme(t), "Self-metrics"), "Metric")
	documented := map[string]bool{}
	for _, row := range rows {
		spans := codeSpans(row[0])
		if len(spans) != 1 || len(row) < 4 {
			t.Errorf("row %q: want one `metric` and Type, Attributes, Meaning cells", row)
			continue
		}
		name := spans[0]
		if documented[name] {
			t.Errorf("README.md lists %s twice", name)
		}
		documented[name] = true
		d, ok := declared[name]
		if !ok {
			t.Errorf("README.md lists %s, which no metadata.yaml declares", name)
			continue
		}
		if kind, _, _ := strings.Cut(row[1], " "); kind != d.kind {
			t.Errorf("%s: README.md says %q, metadata.yaml declares a %s", name, row[1], d.kind)
		}
		if strings.TrimSpace(row[3]) == "" {
			t.Errorf("%s: no meaning", name)
		}
		attrs := docAttrs(row[2])
		if got, want := slices.Sorted(maps.Keys(attrs)), slices.Sorted(maps.Keys(d.attrs)); !slices.Equal(got, want) {
			t.Errorf("%s: README.md gives attributes %v, metadata.yaml %v", name, got, want)
			continue
		}
		for key, values := range attrs {
			enum := d.attrs[key]
			for _, v := range values {
				if !slices.Contains(enum, v) {
					t.Errorf("%s: README.md's %s value %q is not in metadata.yaml's %v", name, key, v, enum)
				}
			}
			if partialValues[name] == key {
				continue
			}
			for _, v := range enum {
				if !slices.Contains(values, v) {
					t.Errorf("%s: README.md does not list the %s value %q", name, key, v)
				}
			}
		}
	}
	for name := range declared {
		if !documented[name] {
			t.Errorf("README.md's self-metrics table has no row for %s", name)
		}
	}
}

// TestNoMetricOutsideMetadata backs readMetadata's premise: no code outside
// mdatagen's generated packages takes a meter, so no metric escapes
// metadata.yaml, and so the README's table.
func TestNoMetricOutsideMetadata(t *testing.T) {
	root := repoRoot(t)
	files := 0
	for _, dir := range []string{"receiver", "exporter", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "metadata" || d.Name() == "tools") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			files++
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, s := range []string{".Meter(", "MeterProvider"} {
				if strings.Contains(string(data), s) {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s uses %s: declare its metrics in metadata.yaml and document them in README.md", rel, s)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files == 0 {
		t.Fatal("no Go file found")
	}
}
