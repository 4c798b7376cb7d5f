package uproberecv

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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
	if !cfg.WarmAttach || !cfg.ExpediteAttach {
		t.Errorf("warm_attach %v, expedite_attach %v: want both set", cfg.WarmAttach, cfg.ExpediteAttach)
	}
	// Both cost something (CPU, a host-wide kernel setting): off unless
	// asked for.
	if def := createDefaultConfig().(*Config); def.WarmAttach || def.ExpediteAttach {
		t.Errorf("default warm_attach %v, expedite_attach %v: want both off", def.WarmAttach, def.ExpediteAttach)
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

// TestConfigEntryGrammar: malformed function references are refused by
// Validate, naming the field; well-formed ones, C++ names included, pass.
func TestConfigEntryGrammar(t *testing.T) {
	for _, entry := range []string{
		"getaddrinfo", "getaddrinfo+0x10", "getaddrinfo+16", "getaddrinfo@@GLIBC_2.2.5",
		"getaddrinfo@GLIBC_2.2.5+4", "operator+", "std::string::operator+=(char)",
		"node::InternalCallbackScope::~InternalCallbackScope", "(anonymous namespace)::run()",
		"std::vector<int, std::allocator<int> >::push_back(int const&)", "main.main", "usdt:prov:name",
	} {
		exit := "return"
		if strings.HasPrefix(entry, "usdt:") {
			exit = "usdt:prov:end"
		}
		cfg := &Config{Probes: []ProbeConfig{{ID: "p", Binary: "/bin/x", Entry: entry, Exit: exit}}}
		if err := cfg.Validate(); err != nil {
			t.Errorf("entry %q refused: %v", entry, err)
		}
	}
	for _, entry := range []string{
		"getaddrinfo+0xZZ", "+0x10", "getaddrinfo+0x", "getaddrinfo@@", "get addr info",
		"getaddrinfo+", "getaddrinfo@GLIBC_2.2.5+0xZZ", "getaddrinfo\t", "get\naddr", "getaddrinfo+-4", "getaddrinfo+-0x4",
	} {
		cfg := &Config{Probes: []ProbeConfig{{ID: "p", Binary: "/bin/x", Entry: entry}}}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "probes[0].entry") {
			t.Errorf("entry %q: Validate() = %v, want an error naming probes[0].entry", entry, err)
		}
		cfg = &Config{Probes: []ProbeConfig{{ID: "p", Binary: "/bin/x", Entry: "f", Exit: entry}}}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "probes[0].exit") {
			t.Errorf("exit %q: Validate() = %v, want an error naming probes[0].exit", entry, err)
		}
	}
}

// TestConfigPIDRange: a pid at or above the kernel's pid_max is refused.
func TestConfigPIDRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for pid, ok := range map[int]bool{1: true, max - 1: true, max: false, 5000000: 5000000 < max, -3: false} {
		cfg := &Config{Probes: []ProbeConfig{{ID: "p", Binary: "/bin/x", Entry: "f", PIDs: []int{pid}}}}
		err := cfg.Validate()
		if ok != (err == nil) || (!ok && !strings.Contains(err.Error(), "probes[0].pids")) {
			t.Errorf("pid %d (pid_max %d): Validate() = %v", pid, max, err)
		}
	}
}

// TestConfigFractionRefused: a fraction in an integer field is an error at
// load, not truncated.
func TestConfigFractionRefused(t *testing.T) {
	cm := confmap.NewFromStringMap(map[string]any{"probes": []any{
		map[string]any{"id": "p", "binary": "/bin/x", "entry": "f", "pids": []any{1, 12.5}},
	}})
	cfg := createDefaultConfig().(*Config)
	err := cm.Unmarshal(cfg)
	if err == nil || !strings.Contains(err.Error(), "probes[0]::pids[1]: 12.5 is not a whole number") {
		t.Errorf("Unmarshal = %v (pids %v), want the fraction refused", err, cfg.Probes)
	}
	cm = confmap.NewFromStringMap(map[string]any{"probes": []any{
		map[string]any{"id": "p", "binary": "/bin/x", "entry": "f", "pids": []any{1, 12.0}},
	}})
	cfg = createDefaultConfig().(*Config)
	if err := cm.Unmarshal(cfg); err != nil || len(cfg.Probes) != 1 || cfg.Probes[0].PIDs[1] != 12 {
		t.Errorf("whole numbers: %v, %+v", err, cfg.Probes)
	}
}

// TestConfigErrorModeOnce: a bad error_mode is reported once by the
// collector's validation, which calls every field's Validate.
func TestConfigErrorModeOnce(t *testing.T) {
	cfg := &Config{ErrorMode: "skip", Probes: []ProbeConfig{{ID: "p", Binary: "/bin/x", Entry: "f"}}}
	err := confmap.Validate(cfg)
	if err == nil || strings.Count(err.Error(), `"skip"`) != 1 || !strings.Contains(err.Error(), `error_mode: "skip" is neither`) {
		t.Errorf("error_mode reported %d times: %v", strings.Count(err.Error(), `"skip"`), err)
	}
}

// TestConfigMissingBinaryLogged: a binary: path that does not exist or is
// a directory gets one clear log line each; an existing file none.
func TestConfigMissingBinaryLogged(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Probes: []ProbeConfig{
		{ID: "missing", Binary: filepath.Join(dir, "nope"), Entry: "f"},
		{ID: "dir", Binary: dir, Entry: "f"},
		{ID: "file", Binary: file, Entry: "f"},
		{ID: "match", FileMatch: "x", Entry: "f"},
	}}
	core, logs := observer.New(zap.InfoLevel)
	cfg.logMissingBinaries(zap.New(core))
	if logs.Len() != 2 {
		t.Fatalf("%d log lines, want 2: %v", logs.Len(), logs.All())
	}
	for i, want := range []string{"missing", "dir"} {
		e := logs.All()[i]
		if e.ContextMap()["probe"] != want || !strings.Contains(e.Message, "probe binary") {
			t.Errorf("line %d: %q %v, want probe %s", i, e.Message, e.ContextMap(), want)
		}
	}
}

// TestConfigLinkedDirLogged: a file_match anchored on a directory that is
// a symlink, or under one, gets one warning naming the real directory;
// one anchored on the real directory, or not anchored, none.
func TestConfigLinkedDirLogged(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Probes: []ProbeConfig{
		{ID: "linked", FileMatch: "^" + regexp.QuoteMeta(link) + `/libx\.so$`, Entry: "f"},
		{ID: "real", FileMatch: "^" + regexp.QuoteMeta(real) + `/libx\.so$`, Entry: "f"},
		{ID: "loose", FileMatch: `/libx\.so$`, Entry: "f"},
		{ID: "binary", Binary: filepath.Join(link, "libx.so"), Entry: "f"},
	}}
	core, logs := observer.New(zap.InfoLevel)
	cfg.logLinkedDirs(zap.New(core))
	if logs.Len() != 1 {
		t.Fatalf("%d log lines, want 1: %v", logs.Len(), logs.All())
	}
	m := logs.All()[0].ContextMap()
	if m["probe"] != "linked" || m["directory"] != link || m["real_directory"] != real {
		t.Errorf("logged %v, want probe linked, directory %s, real_directory %s", m, link, real)
	}
}
