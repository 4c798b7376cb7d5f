package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/confmap"
	"go.yaml.in/yaml/v3"
)

// readmeYAML returns the ```yaml blocks of README.md, by opening line.
func readmeYAML(t *testing.T) map[int]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	blocks := map[int]string{}
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```yaml" {
			continue
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		var body []string
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, strings.TrimPrefix(lines[j], indent))
		}
		blocks[i+1] = strings.Join(body, "\n") + "\n"
		i = j
	}
	return blocks
}

// TestValidateREADMEExamples runs `bpfcol validate` on each YAML example
// of README.md merged into config/local.yaml, the config the README has
// users copy and extend: every component of the example, extensions and
// components built from other modules included, is then checked by the
// factories compiled into bin/bpfcol.
func TestValidateREADMEExamples(t *testing.T) {
	bin := collectorBinary(t)
	basePath := filepath.Join(repoRoot(t), "config", "local.yaml")
	baseData, err := os.ReadFile(basePath)
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeYAML(t)
	if len(blocks) == 0 {
		t.Fatal("no ```yaml block found in README.md")
	}
	for line, text := range blocks {
		t.Run("README.md:"+strconv.Itoa(line), func(t *testing.T) {
			var base, example map[string]any
			if err := yaml.Unmarshal(baseData, &base); err != nil {
				t.Fatalf("parsing %s: %v", basePath, err)
			}
			if err := yaml.Unmarshal([]byte(text), &example); err != nil {
				t.Fatalf("parsing the example: %v\n%s", err, text)
			}
			conf := confmap.NewFromStringMap(base)
			if err := conf.Merge(confmap.NewFromStringMap(example)); err != nil {
				t.Fatal(err)
			}
			merged, err := yaml.Marshal(conf.ToStringMap())
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, merged, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := validate(t, bin, path); err != nil {
				t.Errorf("bpfcol validate of the example merged into config/local.yaml: %v\n%s\nexample:\n%s", err, out, text)
			}
		})
	}
}
