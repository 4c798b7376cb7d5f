package uproberecv

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap/confmaptest"
)

func loadConfig(t *testing.T, name string) *Config {
	t.Helper()
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cm.Sub(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig().(*Config)
	if err := sub.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestConfigLoads(t *testing.T) {
	cfg := loadConfig(t, "uprobe")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Probes) != 2 {
		t.Fatalf("%d probes", len(cfg.Probes))
	}
	p := cfg.Probes[0]
	if p.ID != "dns_lookup" || p.FileMatch != `/libc\.so\.6$` || p.Entry != "getaddrinfo@@GLIBC_2.2.5" || p.MinDuration != time.Millisecond || p.exit() != "return" {
		t.Fatalf("probe 0: %+v", p)
	}
	if q := cfg.Probes[1]; !q.MainThreadOnly || q.Binary != "/usr/bin/node" || q.exit() != "node::InternalCallbackScope::~InternalCallbackScope" {
		t.Fatalf("probe 1: %+v", q)
	}
}

// TestConfigErrorsNameFields checks that every bad field is reported by
// name: a bad regex, a duplicate id, a negative duration, and the rest.
func TestConfigErrorsNameFields(t *testing.T) {
	err := loadConfig(t, "uprobe/bad").Validate()
	if err == nil {
		t.Fatal("bad config validated")
	}
	for _, want := range []string{
		"probes[0].file_match: error parsing regexp",
		`probes[1].id: "a" duplicates probes[0].id`,
		"probes[1].binary: \"relative/path\" is not a clean absolute path",
		"probes[1].entry: empty function name",
		"probes[1].min_duration: -1ms is negative",
		"probes[1].pids: 0 is not a process id",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if err := (&Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "probes: at least one probe") {
		t.Errorf("empty config: %v", err)
	}
	both := &Config{Probes: []ProbeConfig{{ID: "x", FileMatch: "a", Binary: "/a", Entry: "f", Exit: "g+0x4"}}}
	err = both.Validate()
	if err == nil || !strings.Contains(err.Error(), "probes[0].file_match and probes[0].binary: set only one") ||
		!strings.Contains(err.Error(), "probes[0].exit") {
		t.Errorf("file_match and binary, exit with offset: %v", err)
	}
}

// TestConfigUSDT accepts a USDT pair and names the field of a malformed
// USDT reference or of a USDT entry without a USDT exit.
func TestConfigUSDT(t *testing.T) {
	ok := &Config{Probes: []ProbeConfig{{ID: "u", Binary: "/bin/x", Entry: "usdt:prov:begin", Exit: "usdt:prov:end"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("USDT pair: %v", err)
	}
	for _, c := range []struct{ entry, exit, want string }{
		{"usdt:prov", "usdt:prov:end", "probes[0].entry"},
		{"usdt:prov:begin", "", "probes[0].exit"},
		{"usdt:prov:begin", "return", "probes[0].exit"},
		{"usdt:prov:begin", "usdt::end", "probes[0].exit"},
	} {
		cfg := &Config{Probes: []ProbeConfig{{ID: "u", Binary: "/bin/x", Entry: c.entry, Exit: c.exit}}}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("entry %q exit %q: %v, want an error naming %s", c.entry, c.exit, err, c.want)
		}
	}
}
