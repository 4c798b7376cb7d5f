package ebpfprofreceiver

import (
	"fmt"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
)

// OffCPUConfig configures off-CPU profiling: where threads wait, weighted
// by how long.
type OffCPUConfig struct {
	// Enabled turns off-CPU profiling on; it is off by default.
	Enabled bool `mapstructure:"enabled"`
	// MinDuration drops, in BPF, waits shorter than it.
	MinDuration time.Duration `mapstructure:"min_duration"`
	// Probability is the share of switch-outs whose stacks are taken, in
	// (0, 1]: taking a stack at every context switch would cost too much.
	Probability float64 `mapstructure:"probability"`
}

// Off-CPU defaults and bounds.
const (
	defaultOffCPUMinDuration = time.Millisecond
	defaultOffCPUProbability = 0.05
	maxOffCPUMinDuration     = time.Hour
)

func defaultOffCPUConfig() OffCPUConfig {
	return OffCPUConfig{MinDuration: defaultOffCPUMinDuration, Probability: defaultOffCPUProbability}
}

// validate checks every field, also while disabled, so a configuration
// that turns it on later is already known good.
func (c *OffCPUConfig) validate() []error {
	var errs []error
	if c.MinDuration < 0 || c.MinDuration > maxOffCPUMinDuration {
		errs = append(errs, fmt.Errorf("off_cpu::min_duration: %s is outside [0, %s]", c.MinDuration, maxOffCPUMinDuration))
	}
	// Written so that NaN fails too.
	if !(c.Probability > 0 && c.Probability <= 1) {
		errs = append(errs, fmt.Errorf("off_cpu::probability: %v is outside (0, 1]", c.Probability))
	}
	return errs
}

// samplerOptions turns the settings into the sampler's.
func (c *OffCPUConfig) samplerOptions() profiler.OffCPUOptions {
	return profiler.OffCPUOptions{Enabled: c.Enabled, MinDuration: c.MinDuration, Probability: c.Probability}
}
