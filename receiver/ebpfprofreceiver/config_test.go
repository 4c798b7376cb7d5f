package ebpfprofreceiver

import (
	"strings"
	"testing"
	"time"
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
