package ebpfprofreceiver

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/confcheck"
	"github.com/bpfcol/bpfcol/internal/errormode"
	"github.com/bpfcol/bpfcol/internal/interp/hotspot"
	"github.com/bpfcol/bpfcol/internal/interp/python"
	"github.com/bpfcol/bpfcol/internal/interp/v8"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
)

// Limits on the sampling frequency: below 1 Hz nothing useful is sampled, and
// above 1 kHz the probe effect dominates what is measured.
const (
	minSamplingFrequency = 1
	maxSamplingFrequency = 1000
)

// Limits on the report interval: below 100ms a profile holds too few
// samples to be read; above 10m every profile comes late, and an
// interval's distinct stacks, held until its report, hit their bound
// (the excess dropped as stack_table_full).
const (
	minReportInterval = 100 * time.Millisecond
	maxReportInterval = 10 * time.Minute
)

// Config is the configuration of the ebpfprof receiver.
type Config struct {
	// SamplingFrequency is how many stacks are sampled per second on each CPU.
	SamplingFrequency int `mapstructure:"sampling_frequency"`
	// ReportInterval is how often the samples gathered so far are emitted as
	// one pdata Profiles.
	ReportInterval time.Duration `mapstructure:"report_interval"`
	// Symbolizer configures how user frames are named.
	Symbolizer SymbolizerConfig `mapstructure:"symbolizer"`
	// UnwindTableBytes bounds the CFI unwind tables held in BPF for the
	// sampled processes' files; the tables used least recently are
	// evicted beyond it.
	UnwindTableBytes int64 `mapstructure:"unwind_table_bytes"`
	// ErrorMode decides whether a receiver that cannot start (no BPF on
	// this node) stops the collector (propagate) or is left out (ignore).
	ErrorMode errormode.Mode `mapstructure:"error_mode"`
	// OffCPU configures off-CPU profiling, a second profile per process.
	OffCPU OffCPUConfig `mapstructure:"off_cpu"`
	// PageOutStartupImage has the kernel reclaim the collector's own code
	// and read-only data pages once start-up is over (after the second
	// report): those read only by start-up then leave the RSS.
	PageOutStartupImage bool `mapstructure:"page_out_startup_image"`
	// GoMemoryLimit is the floor of the soft memory limit the receiver
	// gives the Go runtime while it runs, raised to twice the highest
	// live heap of the last two minutes when that is larger; 0 leaves the runtime alone, as does a
	// GOMEMLIMIT set in the environment.
	GoMemoryLimit int64 `mapstructure:"go_memory_limit"`
	// Interpreters lists the interpreters whose frames are walked and
	// named (cpython, hotspot, v8); the default is every one bpfcol
	// knows, an empty list none.
	Interpreters []string `mapstructure:"interpreters"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// SymbolizerConfig configures debug info lookup for stripped binaries.
type SymbolizerConfig struct {
	// Debuginfod overrides the DEBUGINFOD_URLS, DEBUGINFOD_TIMEOUT and
	// DEBUGINFOD_MAXSIZE environment variables.
	Debuginfod DebuginfodConfig `mapstructure:"debuginfod"`
	// CacheDir holds fetched debug files; "" means the user cache
	// directory's bpfcol/debuginfod.
	CacheDir string `mapstructure:"cache_dir"`
	// CacheMaxSize bounds CacheDir in bytes; 0 means 2 GiB.
	CacheMaxSize int64 `mapstructure:"cache_max_size"`
	// DebugDirectories are searched for .build-id/NN/REST.debug after
	// /usr/lib/debug and before the cache.
	DebugDirectories []string `mapstructure:"debug_directories"`
}

// DebuginfodConfig configures the debuginfod client. Zero fields fall back
// to the environment, then to elfutils' defaults.
type DebuginfodConfig struct {
	// URLs are tried in order.
	URLs []string `mapstructure:"urls"`
	// Timeout bounds one request.
	Timeout time.Duration `mapstructure:"timeout"`
	// MaxSize bounds one downloaded file, in bytes; 0 means
	// DEBUGINFOD_MAXSIZE, else 1 GiB.
	MaxSize int64 `mapstructure:"max_size"`
}

// Limits on the unwind table store: its BPF array is allocated whole at
// start, and the BPF binary search reaches profiler.MaxUnwindRows rows.
const (
	defaultUnwindTableBytes = 32 << 20
	// defaultGoMemoryLimit: the floor of the Go runtime's soft limit.
	defaultGoMemoryLimit = 24 << 20
	minGoMemoryLimit     = 8 << 20
	minUnwindTableBytes  = 1 << 20
	maxUnwindTableBytes  = profiler.MaxUnwindRows * profiler.UnwindRowBytes
)

// Limits on the symbolizer settings.
const (
	maxDebuginfodTimeout = 10 * time.Minute
	minCacheMaxSize      = 1 << 20
)

func (c *SymbolizerConfig) validate() []error {
	var errs []error
	for i, u := range c.Debuginfod.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("symbolizer::debuginfod::urls[%d]: %q is not an http(s) URL with a host", i, u))
		}
	}
	if c.Debuginfod.Timeout < 0 || c.Debuginfod.Timeout > maxDebuginfodTimeout {
		errs = append(errs, fmt.Errorf("symbolizer::debuginfod::timeout: %s is outside [0, %s]", c.Debuginfod.Timeout, maxDebuginfodTimeout))
	}
	if c.Debuginfod.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("symbolizer::debuginfod::max_size: %d is negative", c.Debuginfod.MaxSize))
	}
	if c.CacheDir != "" && !filepath.IsAbs(c.CacheDir) {
		errs = append(errs, fmt.Errorf("symbolizer::cache_dir: %q is not an absolute path", c.CacheDir))
	}
	if c.CacheMaxSize != 0 && c.CacheMaxSize < minCacheMaxSize {
		errs = append(errs, fmt.Errorf("symbolizer::cache_max_size: %d is below %d bytes (0 means the default)", c.CacheMaxSize, minCacheMaxSize))
	}
	for i, d := range c.DebugDirectories {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("symbolizer::debug_directories[%d]: %q is not an absolute path", i, d))
		}
	}
	// What the environment supplies for the fields left zero must parse
	// too: at run time a bad value would switch debuginfod off.
	getenv := func(k string) string {
		if k == "DEBUGINFOD_URLS" && len(c.Debuginfod.URLs) > 0 {
			return "" // the configured URLs win; they are checked above
		}
		return lookupEnv(k)
	}
	if _, err := debuginfod.ConfigFromEnv(debuginfod.Config{Timeout: c.Debuginfod.Timeout, MaxSize: c.Debuginfod.MaxSize}, getenv); err != nil {
		errs = append(errs, fmt.Errorf("symbolizer::debuginfod: environment: %w", err))
	}
	return errs
}

// lookupEnv reads the environment; a variable for tests.
var lookupEnv = os.Getenv

// symbolizeConfig turns the receiver settings into the symbolizer's.
func (c *SymbolizerConfig) symbolizeConfig() symbolize.SymbolizerConfig {
	dir := c.CacheDir
	if dir == "" {
		if base, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(base, "bpfcol", "debuginfod")
		}
	}
	return symbolize.SymbolizerConfig{
		DebugDirectories: c.DebugDirectories,
		CacheDir:         dir,
		CacheMaxSize:     c.CacheMaxSize,
		Debuginfod: debuginfod.Config{
			URLs:    c.Debuginfod.URLs,
			Timeout: c.Debuginfod.Timeout,
			MaxSize: c.Debuginfod.MaxSize,
		},
	}
}

var (
	_ component.Config    = (*Config)(nil)
	_ confmap.Unmarshaler = (*Config)(nil)
)

// Unmarshal decodes conf into c, refusing a fraction in an integer field
// (sampling_frequency: 20.9), which the decoder would truncate.
func (c *Config) Unmarshal(conf *confmap.Conf) error {
	return confcheck.Unmarshal(conf, c)
}

func createDefaultConfig() component.Config {
	return &Config{
		SamplingFrequency: 20,
		ReportInterval:    5 * time.Second,
		UnwindTableBytes:  defaultUnwindTableBytes,
		ErrorMode:         errormode.Propagate,
		OffCPU:            defaultOffCPUConfig(),
		// Start-up reads about 15 MB of bin/bpfcol that steady
		// profiling never reads again.
		PageOutStartupImage: true,
		GoMemoryLimit:       defaultGoMemoryLimit,
		Interpreters:        slices.Clone(knownInterpreters),
	}
}

// knownInterpreters are the interpreters bpfcol follows.
var knownInterpreters = []string{python.Name, hotspot.Name, v8.Name}

// interpreter reports whether name is in Interpreters.
func (c *Config) validateInterpreters() []error {
	var errs []error
	for i, name := range c.Interpreters {
		switch {
		case !slices.Contains(knownInterpreters, name):
			errs = append(errs, fmt.Errorf("interpreters[%d]: %q is not one of %v", i, name, knownInterpreters))
		case slices.Index(c.Interpreters, name) < i:
			errs = append(errs, fmt.Errorf("interpreters[%d]: %q is listed twice", i, name))
		}
	}
	return errs
}

// Validate checks every field and names the one that is wrong.
func (c *Config) Validate() error {
	var errs []error
	if c.SamplingFrequency < minSamplingFrequency || c.SamplingFrequency > maxSamplingFrequency {
		errs = append(errs, fmt.Errorf("sampling_frequency: %d Hz is outside [%d, %d]", c.SamplingFrequency, minSamplingFrequency, maxSamplingFrequency))
	}
	if c.ReportInterval < minReportInterval || c.ReportInterval > maxReportInterval {
		errs = append(errs, fmt.Errorf("report_interval: %s is outside [%s, %s]", c.ReportInterval, minReportInterval, maxReportInterval))
	}
	if c.GoMemoryLimit != 0 && c.GoMemoryLimit < minGoMemoryLimit {
		errs = append(errs, fmt.Errorf("go_memory_limit: %d is below %d (0 turns it off)", c.GoMemoryLimit, minGoMemoryLimit))
	}
	if c.UnwindTableBytes < minUnwindTableBytes || c.UnwindTableBytes > maxUnwindTableBytes {
		errs = append(errs, fmt.Errorf("unwind_table_bytes: %d is outside [%d, %d]", c.UnwindTableBytes, minUnwindTableBytes, maxUnwindTableBytes))
	}
	errs = append(errs, c.Symbolizer.validate()...)
	errs = append(errs, c.validateInterpreters()...)
	errs = append(errs, c.OffCPU.validate()...)
	// error_mode is checked by its own Validate, which the collector calls
	// on every field: calling it here too would print its error twice.
	return errors.Join(errs...)
}
