package uproberecv

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

func TestRetainBatchDefaultsValidate(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.Probes = []ProbeConfig{{ID: "a", Binary: "/bin/true", Entry: "main"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Retain.MaxBinaries != defaultRetainBinaries || cfg.Retain.MaxAge != defaultRetainAge ||
		cfg.Batch.MaxRecords != defaultBatchRecords || cfg.Batch.Timeout != defaultBatchTimeout {
		t.Fatalf("defaults %+v %+v", cfg.Retain, cfg.Batch)
	}
}

func TestRetainBatchFromYAML(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cm := confmap.NewFromStringMap(map[string]any{
		"probes": []any{map[string]any{"id": "a", "binary": "/bin/true", "entry": "main"}},
		"retain": map[string]any{"max_binaries": 3, "max_age": "5m"},
		"batch":  map[string]any{"max_records": 100, "timeout": "1s"},
	})
	if err := cm.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Retain.MaxBinaries != 3 || cfg.Retain.MaxAge != 5*time.Minute || cfg.Batch.MaxRecords != 100 || cfg.Batch.Timeout != time.Second {
		t.Fatalf("loaded %+v %+v", cfg.Retain, cfg.Batch)
	}
}

func TestRetainBatchErrorsNameFields(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Retain.MaxBinaries = -1 }, "retain.max_binaries: -1 is outside [0, 1024]"},
		{func(c *Config) { c.Retain.MaxBinaries = maxBinaries + 1 }, "retain.max_binaries: 1025 is outside"},
		{func(c *Config) { c.Retain.MaxAge = -time.Second }, "retain.max_age: -1s is negative"},
		{func(c *Config) { c.Batch.MaxRecords = -1 }, "batch.max_records: -1 is outside [1, 65536]"},
		{func(c *Config) { c.Batch.MaxRecords = maxBatchRecords + 1 }, "batch.max_records: 65537 is outside"},
		{func(c *Config) { c.Batch.Timeout = time.Microsecond }, "batch.timeout: 1µs is outside [1ms, 1m0s]"},
		{func(c *Config) { c.Batch.Timeout = time.Hour }, "batch.timeout: 1h0m0s is outside"},
	} {
		cfg := createDefaultConfig().(*Config)
		cfg.Probes = []ProbeConfig{{ID: "a", Binary: "/bin/true", Entry: "main"}}
		tc.edit(cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

func TestBatchZeroTakesDefaults(t *testing.T) {
	cfg := &Config{Probes: []ProbeConfig{{ID: "a", Binary: "/bin/true", Entry: "main"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if b := cfg.batch(); b.MaxRecords != defaultBatchRecords || b.Timeout != defaultBatchTimeout {
		t.Fatalf("zero batch resolves to %+v", b)
	}
}
