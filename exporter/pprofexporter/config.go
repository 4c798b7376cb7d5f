package pprofexporter

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/component"
)

// Config configures the pprof exporter.
type Config struct {
	// Directory receives one profile-<time>.pb.gz per export and
	// latest.pb.gz. It is created when the exporter starts.
	Directory string `mapstructure:"directory"`
	// MaxFiles is how many per-export files are kept; older ones are
	// removed. latest.pb.gz is not counted.
	MaxFiles int `mapstructure:"max_files"`

	// Prevent unkeyed literal initialization.
	_ struct{}
}

var _ component.Config = (*Config)(nil)

// Sixty files keep five minutes of history at the ebpfprof receiver's
// default 5s report interval.
const (
	defaultDirectory = "out/profiles"
	defaultMaxFiles  = 60
)

func createDefaultConfig() component.Config {
	return &Config{
		Directory: defaultDirectory,
		MaxFiles:  defaultMaxFiles,
	}
}

// Validate checks every field and names the one that is wrong.
func (c *Config) Validate() error {
	var errs []error
	if c.Directory == "" {
		errs = append(errs, errors.New("directory: must not be empty"))
	}
	if c.MaxFiles < 1 {
		errs = append(errs, fmt.Errorf("max_files: %d is below 1", c.MaxFiles))
	}
	return errors.Join(errs...)
}
