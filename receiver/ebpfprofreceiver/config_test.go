package ebpfprofreceiver

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

func TestSymbolizerConfigValidate(t *testing.T) {
	valid := createDefaultConfig().(*Config)
	valid.Symbolizer = SymbolizerConfig{
		Debuginfod:       DebuginfodConfig{URLs: []string{"https://debuginfod.example.org"}, Timeout: 30 * time.Second, MaxSize: 1 << 30},
		CacheDir:         "/var/cache/bpfcol",
		CacheMaxSize:     1 << 30,
		DebugDirectories: []string{"/opt/debug"},
	}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	cases := map[string]func(*SymbolizerConfig){
		"symbolizer::debuginfod::urls[0]":  func(c *SymbolizerConfig) { c.Debuginfod.URLs = []string{"file:///x"} },
		"symbolizer::debuginfod::timeout":  func(c *SymbolizerConfig) { c.Debuginfod.Timeout = -time.Second },
		"symbolizer::debuginfod::max_size": func(c *SymbolizerConfig) { c.Debuginfod.MaxSize = -1 },
		"symbolizer::cache_dir":            func(c *SymbolizerConfig) { c.CacheDir = "relative/dir" },
		"symbolizer::cache_max_size":       func(c *SymbolizerConfig) { c.CacheMaxSize = 10 },
		"symbolizer::debug_directories[1]": func(c *SymbolizerConfig) { c.DebugDirectories = []string{"/ok", "nope"} },
	}
	for field, mutate := range cases {
		cfg := *valid
		cfg.Symbolizer.DebugDirectories = append([]string(nil), valid.Symbolizer.DebugDirectories...)
		mutate(&cfg.Symbolizer)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate() = %v, want an error naming the field", field, err)
		}
	}
	if got := valid.Symbolizer.symbolizeConfig(); got.CacheDir != "/var/cache/bpfcol" || len(got.Debuginfod.URLs) != 1 {
		t.Errorf("symbolizeConfig() = %+v", got)
	}
}

// TestConfigFractionRefused: sampling_frequency: 20.9 is an error at load,
// not 20 Hz; so is a fraction in any integer field.
func TestConfigFractionRefused(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"ebpfprof/fraction":      "sampling_frequency: 20.9 is not a whole number",
		"ebpfprof/fraction_size": "symbolizer::cache_max_size: 2.0971525e+06 is not a whole number",
	} {
		sub, err := cm.Sub(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := createDefaultConfig().(*Config)
		err = sub.Unmarshal(cfg)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Unmarshal = %v (sampling_frequency %d), want %q", name, err, cfg.SamplingFrequency, want)
		}
	}
	sub, err := cm.Sub("ebpfprof/whole")
	if err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig().(*Config)
	if err := sub.Unmarshal(cfg); err != nil || cfg.SamplingFrequency != 21 || cfg.Validate() != nil {
		t.Errorf("whole: %v, %d Hz", err, cfg.SamplingFrequency)
	}
}

// TestConfigDebuginfodEnv: bad DEBUGINFOD_* values fail Validate, naming
// the variable, unless the config sets the field they would fill.
func TestConfigDebuginfodEnv(t *testing.T) {
	env := map[string]string{}
	saved := lookupEnv
	lookupEnv = func(k string) string { return env[k] }
	t.Cleanup(func() { lookupEnv = saved })
	cfg := createDefaultConfig().(*Config)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("empty environment: %v", err)
	}
	for name, value := range map[string]string{
		"DEBUGINFOD_TIMEOUT": "soon",
		"DEBUGINFOD_MAXSIZE": "-5",
		"DEBUGINFOD_URLS":    "ftp://debuginfod.example.org",
	} {
		clear(env)
		env[name] = value
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: Validate() = %v, want an error naming %s", name, value, err, name)
		}
	}
	// Set in the config: the environment is not read.
	env["DEBUGINFOD_TIMEOUT"], env["DEBUGINFOD_MAXSIZE"], env["DEBUGINFOD_URLS"] = "soon", "-5", "ftp://x"
	set := *cfg
	set.Symbolizer.Debuginfod = DebuginfodConfig{URLs: []string{"https://debuginfod.example.org"}, Timeout: time.Minute, MaxSize: 1 << 20}
	if err := set.Validate(); err != nil {
		t.Errorf("config overrides the environment: %v", err)
	}
}

// TestConfigErrorModeOnce: a bad error_mode is reported once by the
// collector's validation, which calls every field's Validate.
func TestConfigErrorModeOnce(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.ErrorMode = "skip"
	err := confmap.Validate(cfg)
	if err == nil || strings.Count(err.Error(), `"skip"`) != 1 || !strings.Contains(err.Error(), `error_mode: "skip" is neither`) {
		t.Errorf("Validate = %v, want error_mode named once", err)
	}
}

func TestUnwindTableBytesValidate(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("default config rejected: %v", err)
	}
	for _, bad := range []int64{0, 1 << 10, 1 << 40} {
		c := *cfg
		c.UnwindTableBytes = bad
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "unwind_table_bytes") {
			t.Errorf("unwind_table_bytes %d: Validate() = %v, want an error naming the field", bad, err)
		}
	}
}

func TestGoMemoryLimitValidate(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	for _, ok := range []int64{0, 8 << 20, 1 << 30} {
		c := *cfg
		c.GoMemoryLimit = ok
		if err := c.Validate(); err != nil {
			t.Errorf("go_memory_limit %d: Validate() = %v", ok, err)
		}
	}
	for _, bad := range []int64{-1, 1 << 20} {
		c := *cfg
		c.GoMemoryLimit = bad
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "go_memory_limit") {
			t.Errorf("go_memory_limit %d: Validate() = %v, want an error naming the field", bad, err)
		}
	}
}

func TestReportIntervalValidate(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	for _, ok := range []time.Duration{100 * time.Millisecond, 5 * time.Second, 10 * time.Minute} {
		c := *cfg
		c.ReportInterval = ok
		if err := c.Validate(); err != nil {
			t.Errorf("report_interval %s: Validate() = %v", ok, err)
		}
	}
	for _, bad := range []time.Duration{0, 99 * time.Millisecond, 10*time.Minute + time.Second, 100000 * time.Hour} {
		c := *cfg
		c.ReportInterval = bad
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "report_interval: "+bad.String()+" is outside [100ms, 10m0s]") {
			t.Errorf("report_interval %s: Validate() = %v, want an error naming the field and its range", bad, err)
		}
	}
}

// TestSymbolizerCacheDirDefault checks where README.md says an unset
// symbolizer::cache_dir leads: the user cache dir + bpfcol/debuginfod,
// that is $XDG_CACHE_HOME, else $HOME/.cache; with neither set, no cache
// dir (nothing is fetched).
func TestSymbolizerCacheDirDefault(t *testing.T) {
	for _, c := range []struct {
		xdg, home, want string
	}{
		{"/srv/xdg", "/home/u", "/srv/xdg/bpfcol/debuginfod"},
		{"", "/home/u", "/home/u/.cache/bpfcol/debuginfod"},
		{"", "", ""},
	} {
		t.Setenv("XDG_CACHE_HOME", c.xdg)
		t.Setenv("HOME", c.home)
		var s SymbolizerConfig
		if got := s.symbolizeConfig().CacheDir; got != c.want {
			t.Errorf("XDG_CACHE_HOME=%q HOME=%q: cache dir %q, want %q", c.xdg, c.home, got, c.want)
		}
	}
}

// TestConfigInterpreters: the default follows every interpreter bpfcol
// knows; an empty list none; an unknown or repeated name is refused with
// the field and its index.
func TestConfigInterpreters(t *testing.T) {
	def := createDefaultConfig().(*Config)
	for _, name := range []string{"cpython", "hotspot"} {
		if !slices.Contains(def.Interpreters, name) {
			t.Errorf("default interpreters %v: %s left out", def.Interpreters, name)
		}
	}
	off := createDefaultConfig().(*Config)
	off.Interpreters = []string{}
	if err := off.Validate(); err != nil || slices.Contains(off.Interpreters, "cpython") {
		t.Errorf("interpreters: []: %v, cpython %v", err, slices.Contains(off.Interpreters, "cpython"))
	}
	for list, want := range map[string]string{
		"cpython,ruby":    `interpreters[1]: "ruby" is not one of [cpython hotspot v8]`,
		"CPython":         `interpreters[0]: "CPython" is not one of [cpython hotspot v8]`,
		"cpython,cpython": `interpreters[1]: "cpython" is listed twice`,
	} {
		cfg := createDefaultConfig().(*Config)
		cfg.Interpreters = strings.Split(list, ",")
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("interpreters %v: Validate() = %v, want %q", cfg.Interpreters, err, want)
		}
	}
}
