package uproberecv

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/bpfcol/bpfcol/internal/errormode"
	"github.com/bpfcol/bpfcol/internal/probesite"
)

// exitReturn closes a scope when the entry function returns.
const exitReturn = probesite.ExitReturn

// idPattern keeps probe ids usable as log bodies and attribute values in
// queries: no spaces or quoting needed.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// maxProbes bounds the probes of one receiver (one BPF settings slot each).
const maxProbes = 256

// Config is the configuration of the uprobe receiver.
type Config struct {
	// Probes are the functions to time.
	Probes []ProbeConfig `mapstructure:"probes"`
	// ErrorMode decides whether a receiver that cannot start (no BPF on
	// this node) stops the collector (propagate) or is left out (ignore).
	ErrorMode errormode.Mode `mapstructure:"error_mode"`
	// Retain bounds the binaries matched by file_match that stay attached
	// after their last process exited, so that their next exec is covered
	// from its first instruction.
	Retain RetainConfig `mapstructure:"retain"`
	// Batch bounds the log requests handed to the pipeline.
	Batch BatchConfig `mapstructure:"batch"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// ProbeConfig declares one scope: where it opens and closes, and which
// scopes are worth a record.
type ProbeConfig struct {
	// ID names the probe; it is the body and the probe.id attribute of its
	// records. Unique.
	ID string `mapstructure:"id"`
	// FileMatch is a regular expression on the paths of the executables and
	// libraries processes map. Exactly one of FileMatch and Binary is set.
	FileMatch string `mapstructure:"file_match"`
	// Binary is the exact path of one executable or library.
	Binary string `mapstructure:"binary"`
	// Entry is the function whose call opens the scope: a symbol (mangled
	// or demangled, optionally versioned like getaddrinfo@@GLIBC_2.2.5), or
	// "symbol+0xoff".
	Entry string `mapstructure:"entry"`
	// Exit is "return" (the entry function's own return) or a second
	// function whose call closes the scope.
	Exit string `mapstructure:"exit"`
	// MainThreadOnly ignores scopes opened on threads other than the main
	// thread (tid == pid).
	MainThreadOnly bool `mapstructure:"main_thread_only"`
	// MinDuration drops scopes shorter than this.
	MinDuration time.Duration `mapstructure:"min_duration"`
	// PIDs, when set, limits the probe to these processes.
	PIDs []int `mapstructure:"pids"`
}

// RetainConfig bounds the attached binaries no process runs now. Binaries
// named by binary: are attached from start and never count here.
type RetainConfig struct {
	// MaxBinaries is how many are kept, the longest idle detached first;
	// 0 detaches a binary when its last process exits.
	MaxBinaries int `mapstructure:"max_binaries"`
	// MaxAge detaches a binary idle for longer.
	MaxAge time.Duration `mapstructure:"max_age"`
}

// BatchConfig bounds one export request: the records of a drain go out
// together once MaxRecords are waiting or the first waited Timeout. Zero
// values take the defaults.
type BatchConfig struct {
	// MaxRecords bounds the log records of one request.
	MaxRecords int `mapstructure:"max_records"`
	// Timeout bounds how long a record waits for its batch.
	Timeout time.Duration `mapstructure:"timeout"`
}

// Defaults and bounds of Retain and Batch.
const (
	defaultRetainBinaries = 256
	defaultRetainAge      = time.Hour
	defaultBatchRecords   = 4096
	defaultBatchTimeout   = 200 * time.Millisecond
	maxBatchRecords       = 1 << 16
	minBatchTimeout       = time.Millisecond
	maxBatchTimeout       = time.Minute
)

var _ component.Config = (*Config)(nil)

func createDefaultConfig() component.Config {
	return &Config{
		ErrorMode: errormode.Propagate,
		Retain:    RetainConfig{MaxBinaries: defaultRetainBinaries, MaxAge: defaultRetainAge},
		Batch:     BatchConfig{MaxRecords: defaultBatchRecords, Timeout: defaultBatchTimeout},
	}
}

// Validate checks every field and names the one that is wrong.
func (c *Config) Validate() error {
	var errs []error
	if err := c.ErrorMode.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(c.Probes) == 0 {
		errs = append(errs, errors.New("probes: at least one probe is required"))
	}
	if len(c.Probes) > maxProbes {
		errs = append(errs, fmt.Errorf("probes: %d probes, at most %d", len(c.Probes), maxProbes))
	}
	seen := map[string]int{}
	for i := range c.Probes {
		p := &c.Probes[i]
		field := func(name string) string { return fmt.Sprintf("probes[%d].%s", i, name) }
		switch {
		case p.ID == "":
			errs = append(errs, fmt.Errorf("%s: required", field("id")))
		case !idPattern.MatchString(p.ID):
			errs = append(errs, fmt.Errorf("%s: %q has characters outside [A-Za-z0-9_.:-]", field("id"), p.ID))
		default:
			if j, dup := seen[p.ID]; dup {
				errs = append(errs, fmt.Errorf("%s: %q duplicates probes[%d].id", field("id"), p.ID, j))
			}
			seen[p.ID] = i
		}
		switch {
		case p.FileMatch == "" && p.Binary == "":
			errs = append(errs, fmt.Errorf("%s or %s: one is required", field("file_match"), field("binary")))
		case p.FileMatch != "" && p.Binary != "":
			errs = append(errs, fmt.Errorf("%s and %s: set only one", field("file_match"), field("binary")))
		case p.FileMatch != "":
			if _, err := regexp.Compile(p.FileMatch); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", field("file_match"), err))
			}
		case !filepath.IsAbs(p.Binary) || filepath.Clean(p.Binary) != p.Binary:
			errs = append(errs, fmt.Errorf("%s: %q is not a clean absolute path", field("binary"), p.Binary))
		}
		entrySpec, err := probesite.ParseSpec(p.Entry)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field("entry"), err))
		}
		if entrySpec.Provider != "" && !strings.HasPrefix(p.Exit, "usdt:") {
			errs = append(errs, fmt.Errorf("%s: a USDT entry needs a usdt:provider:name exit, not %q", field("exit"), p.exit()))
		}
		if p.Exit != "" && p.Exit != exitReturn {
			spec, err := probesite.ParseSpec(p.Exit)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", field("exit"), err))
			} else if spec.Offset != 0 {
				// An offset exit would need the same care as an entry offset
				// and nobody asked for it.
				errs = append(errs, fmt.Errorf("%s: %q: an exit function takes no offset", field("exit"), p.Exit))
			}
		}
		if p.MinDuration < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is negative", field("min_duration"), p.MinDuration))
		}
		for _, pid := range p.PIDs {
			if pid <= 0 {
				errs = append(errs, fmt.Errorf("%s: %d is not a process id", field("pids"), pid))
			}
		}
	}
	errs = append(errs, c.validateRetainBatch()...)
	return errors.Join(errs...)
}

// validateRetainBatch checks the retain and batch sections.
func (c *Config) validateRetainBatch() []error {
	var errs []error
	if c.Retain.MaxBinaries < 0 || c.Retain.MaxBinaries > maxBinaries {
		errs = append(errs, fmt.Errorf("retain.max_binaries: %d is outside [0, %d]", c.Retain.MaxBinaries, maxBinaries))
	}
	if c.Retain.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("retain.max_age: %s is negative", c.Retain.MaxAge))
	}
	if c.Batch.MaxRecords < 0 || c.Batch.MaxRecords > maxBatchRecords {
		errs = append(errs, fmt.Errorf("batch.max_records: %d is outside [1, %d] (0: %d)", c.Batch.MaxRecords, maxBatchRecords, defaultBatchRecords))
	}
	if c.Batch.Timeout != 0 && (c.Batch.Timeout < minBatchTimeout || c.Batch.Timeout > maxBatchTimeout) {
		errs = append(errs, fmt.Errorf("batch.timeout: %s is outside [%s, %s]", c.Batch.Timeout, minBatchTimeout, maxBatchTimeout))
	}
	return errs
}

// batch returns Batch with zero fields set to their defaults.
func (c *Config) batch() BatchConfig {
	b := c.Batch
	if b.MaxRecords == 0 {
		b.MaxRecords = defaultBatchRecords
	}
	if b.Timeout == 0 {
		b.Timeout = defaultBatchTimeout
	}
	return b
}

// exit returns the probe's exit, "return" when unset.
func (p *ProbeConfig) exit() string {
	if p.Exit == "" {
		return exitReturn
	}
	return p.Exit
}
