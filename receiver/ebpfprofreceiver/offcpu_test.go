package ebpfprofreceiver

import (
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

// TestOffCPUConfig checks the defaults the issue names, that the YAML keys
// land in the fields, and that every bad value is named in the error.
func TestOffCPUConfig(t *testing.T) {
	def := createDefaultConfig().(*Config)
	if def.OffCPU.Enabled || def.OffCPU.MinDuration != time.Millisecond || def.OffCPU.Probability != 0.05 {
		t.Fatalf("default off_cpu %+v, want disabled, 1ms, 0.05", def.OffCPU)
	}

	cfg := createDefaultConfig().(*Config)
	conf := confmap.NewFromStringMap(map[string]any{
		"off_cpu": map[string]any{"enabled": true, "min_duration": "5ms", "probability": 0.5},
	})
	if err := conf.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	if !cfg.OffCPU.Enabled || cfg.OffCPU.MinDuration != 5*time.Millisecond || cfg.OffCPU.Probability != 0.5 {
		t.Fatalf("off_cpu %+v after unmarshalling", cfg.OffCPU)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	if o := cfg.OffCPU.samplerOptions(); !o.Enabled || o.MinDuration != 5*time.Millisecond || o.Probability != 0.5 {
		t.Fatalf("sampler options %+v", o)
	}

	cases := []struct {
		field  string
		mutate func(*OffCPUConfig)
	}{
		{"off_cpu::min_duration", func(c *OffCPUConfig) { c.MinDuration = -time.Millisecond }},
		{"off_cpu::min_duration", func(c *OffCPUConfig) { c.MinDuration = 2 * time.Hour }},
		{"off_cpu::probability", func(c *OffCPUConfig) { c.Probability = 0 }},
		{"off_cpu::probability", func(c *OffCPUConfig) { c.Probability = 1.5 }},
		{"off_cpu::probability", func(c *OffCPUConfig) { c.Probability = math.NaN() }},
	}
	for _, tc := range cases {
		for _, enabled := range []bool{true, false} {
			c := *def
			c.OffCPU.Enabled = enabled
			tc.mutate(&c.OffCPU)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%+v: Validate() = %v, want an error naming %s", c.OffCPU, err, tc.field)
			}
		}
	}
}
