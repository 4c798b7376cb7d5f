package uproberecv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/confcheck"
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
	// WarmAttach keeps the kernel's uprobe registration in its fast mode,
	// so that a binary or library first seen after start is attached
	// within about a millisecond of its exec or mmap instead of after an
	// RCU grace period (4-25 ms). It costs 2-3% of one CPU for as long as
	// a file_match probe exists, so it is off by default.
	WarmAttach bool `mapstructure:"warm_attach"`
	// ExpediteAttach sets the kernel's global /sys/kernel/rcu_expedited
	// for the fraction of a millisecond an attach's first registration
	// takes (when it was clear), so that attaching a binary or library
	// first seen after start waits for an expedited RCU grace period
	// (0.2-1 ms) instead of a normal one (4-25 ms). It costs next to no
	// CPU, but meanwhile every RCU grace period the host waits for is
	// expedited, so it is off by default; it needs root with a writable
	// /sys.
	ExpediteAttach bool `mapstructure:"expedite_attach"`

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

var (
	_ component.Config    = (*Config)(nil)
	_ confmap.Unmarshaler = (*Config)(nil)
)

// Unmarshal decodes conf into c, refusing a fraction in an integer field
// (pids: [12.5]), which the decoder would truncate.
func (c *Config) Unmarshal(conf *confmap.Conf) error {
	return confcheck.Unmarshal(conf, c)
}

// pidMaxFile holds the largest process id plus one; defaultPIDMax is the
// kernel's upper bound, used when the file cannot be read.
const (
	pidMaxFile    = "/proc/sys/kernel/pid_max"
	defaultPIDMax = 4194304
)

// pidMax returns the kernel's pid_max: every pid is below it.
func pidMax() int {
	b, err := os.ReadFile(pidMaxFile)
	if err != nil {
		return defaultPIDMax
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return defaultPIDMax
	}
	return n
}

// versionPattern matches symbol versions such as GLIBC_2.2.5.
var versionPattern = regexp.MustCompile(`^[A-Za-z0-9_.]+$`)

// offsetLike matches what follows a '+' meant as an offset: a digit or a
// sign first (no symbol has "+-" in it; an offset cannot be negative).
var offsetLike = regexp.MustCompile(`^[-+0-9]`)

// checkFunction applies the entry grammar on top of probesite.ParseSpec,
// which keeps anything that is not a valid offset or version as part of
// the name (so that C++ names such as "operator+" stay whole): a symbol,
// optionally "@VERSION" or "@@VERSION", optionally "+OFFSET" in decimal or
// 0x hex. Spaces are allowed only in demangled C++ names.
func checkFunction(s string, spec probesite.Spec) error {
	if spec.Provider != "" {
		return nil
	}
	name := spec.Name
	if i := strings.IndexByte(name, '+'); i >= 0 && !strings.Contains(name, "operator") {
		switch rest := name[i+1:]; {
		case i == 0:
			return fmt.Errorf("%q: no function name before the offset", s)
		case rest == "" || offsetLike.MatchString(rest):
			return fmt.Errorf("%q: the offset after '+' is not a number (decimal or 0x hex)", s)
		}
	}
	if i := strings.IndexByte(s, '@'); i >= 0 && !strings.ContainsAny(s[i:], "()<>:") && !versionPattern.MatchString(spec.Version) {
		return fmt.Errorf("%q: the version after '@' is empty or not [A-Za-z0-9_.]", s)
	}
	cxx := strings.Contains(name, "::") || strings.ContainsAny(name, "(<") || strings.Contains(name, "operator")
	for _, r := range name {
		if unicode.IsControl(r) || (unicode.IsSpace(r) && !cxx) {
			return fmt.Errorf("%q: a function name has no spaces or control characters (outside a demangled C++ name)", s)
		}
	}
	return nil
}

// logMissingBinaries logs once, at start, every binary: path that does not
// exist or is not a file: nothing can be attached to it until it appears.
func (c *Config) logMissingBinaries(logger *zap.Logger) {
	for i := range c.Probes {
		p := &c.Probes[i]
		if p.Binary == "" {
			continue
		}
		fi, err := os.Stat(p.Binary)
		switch {
		case err != nil:
			logger.Warn("probe binary not found: it is attached when written there or when a process maps it",
				zap.String("probe", p.ID), zap.String("binary", p.Binary), zap.Error(err))
		case !fi.Mode().IsRegular():
			logger.Warn("probe binary is not a regular file: nothing is attached for this probe",
				zap.String("probe", p.ID), zap.String("binary", p.Binary), zap.String("mode", fi.Mode().String()))
		}
	}
}

// logLinkedDirs logs once, at start, every file_match anchored on a
// directory reached through a symlink: processes map files by their real
// path, which such a regex never matches, so its files are attached only
// from the directory at start or when written there, and a library loaded
// after its attachment was let go is missed without a trace.
func (c *Config) logLinkedDirs(logger *zap.Logger) {
	for i := range c.Probes {
		p := &c.Probes[i]
		dir, ok := literalDir(p.FileMatch)
		if !ok {
			continue
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil || real == dir {
			continue
		}
		logger.Warn("file_match names a directory through a symlink: processes map its files by their real path, which the regex does not match; name the real directory",
			zap.String("probe", p.ID), zap.String("file_match", p.FileMatch), zap.String("directory", dir), zap.String("real_directory", real))
	}
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

func createDefaultConfig() component.Config {
	return &Config{
		ErrorMode: errormode.Propagate,
		Retain:    RetainConfig{MaxBinaries: defaultRetainBinaries, MaxAge: defaultRetainAge},
		Batch:     BatchConfig{MaxRecords: defaultBatchRecords, Timeout: defaultBatchTimeout},
	}
}

// Validate checks every field and names the one that is wrong.
func (c *Config) Validate() error {
	// error_mode is checked by its own Validate, which the collector calls
	// on every field: calling it here too would print its error twice.
	var errs []error
	maxPID := pidMax()
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
		if err == nil {
			err = checkFunction(p.Entry, entrySpec)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field("entry"), err))
		}
		if entrySpec.Provider != "" && !strings.HasPrefix(p.Exit, "usdt:") {
			errs = append(errs, fmt.Errorf("%s: a USDT entry needs a usdt:provider:name exit, not %q", field("exit"), p.exit()))
		}
		if p.Exit != "" && p.Exit != exitReturn {
			spec, err := probesite.ParseSpec(p.Exit)
			if err == nil {
				err = checkFunction(p.Exit, spec)
			}
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
			if pid <= 0 || pid >= maxPID {
				errs = append(errs, fmt.Errorf("%s: %d is not a process id: want 1 to %d (%s is %d)", field("pids"), pid, maxPID-1, pidMaxFile, maxPID))
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
