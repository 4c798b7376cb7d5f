package ebpfprofreceiver

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/component"
)

// Limits on the sampling frequency: below 1 Hz nothing useful is sampled, and
// above 1 kHz the probe effect dominates what is measured.
const (
	minSamplingFrequency = 1
	maxSamplingFrequency = 1000
)

// Config is the configuration of the ebpfprof receiver.
type Config struct {
	// SamplingFrequency is how many stacks are sampled per second on each CPU.
	SamplingFrequency int `mapstructure:"sampling_frequency"`
	// ReportInterval is how often the samples gathered so far are emitted as
	// one pdata Profiles.
	ReportInterval time.Duration `mapstructure:"report_interval"`

	// prevent unkeyed literal initialization
	_ struct{}
}

var _ component.Config = (*Config)(nil)

func createDefaultConfig() component.Config {
	return &Config{
		SamplingFrequency: 20,
		ReportInterval:    5 * time.Second,
	}
}

// Validate checks every field and names the one that is wrong.
func (c *Config) Validate() error {
	var errs []error
	if c.SamplingFrequency < minSamplingFrequency || c.SamplingFrequency > maxSamplingFrequency {
		errs = append(errs, fmt.Errorf("sampling_frequency: %d Hz is outside [%d, %d]", c.SamplingFrequency, minSamplingFrequency, maxSamplingFrequency))
	}
	if c.ReportInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("report_interval: %s is shorter than 100ms", c.ReportInterval))
	}
	return errors.Join(errs...)
}
