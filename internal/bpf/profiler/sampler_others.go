//go:build !linux

package profiler

import (
	"errors"
	"time"

	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

var errNotLinux = errors.New("the BPF stack sampler runs only on linux")

// Sampler is a loaded and attached stack sampler. It exists only on linux.
type Sampler struct{}

// CheckSupport reports that sampling needs linux.
func CheckSupport() error { return errNotLinux }

// New fails: sampling needs linux.
func New(Options) (*Sampler, error) { return nil, errNotLinux }

// Read fails: sampling needs linux.
func (*Sampler) Read(*Sample) error { return errNotLinux }

// SetDeadline does nothing: sampling needs linux.
func (*Sampler) SetDeadline(time.Time) {}

// Counters fails: sampling needs linux.
func (*Sampler) Counters() (Counters, error) { return Counters{}, errNotLinux }

// CPUs is zero: sampling needs linux.
func (*Sampler) CPUs() int { return 0 }

// Stop does nothing.
func (*Sampler) Stop() error { return nil }

// Flush does nothing.
func (*Sampler) Flush() error { return nil }

// Close does nothing.
func (*Sampler) Close() error { return nil }

// UnwindRowCapacity is zero: sampling needs linux.
func (*Sampler) UnwindRowCapacity() uint32 { return 0 }

// WriteUnwindRows fails: sampling needs linux.
func (*Sampler) WriteUnwindRows(uint32, []cfi.Row, uint64) error { return errNotLinux }

// SetUnwindMappings fails: sampling needs linux.
func (*Sampler) SetUnwindMappings(uint32, []UnwindMapping) error { return errNotLinux }

// DeleteUnwindMappings fails: sampling needs linux.
func (*Sampler) DeleteUnwindMappings(uint32) error { return errNotLinux }

// RunStats fails: sampling needs linux.
func (*Sampler) RunStats() (time.Duration, uint64, error) { return 0, 0, errNotLinux }

// OffCPURunStats fails: sampling needs linux.
func (*Sampler) OffCPURunStats() (time.Duration, uint64, error) { return 0, 0, errNotLinux }

// OffCPUWalkStats fails: sampling needs linux.
func (*Sampler) OffCPUWalkStats() (time.Duration, uint64, error) { return 0, 0, errNotLinux }

// OffCPUTaskWork is false: sampling needs linux.
func (*Sampler) OffCPUTaskWork() bool { return false }

// CheckOffCPUTaskWork fails: sampling needs linux.
func CheckOffCPUTaskWork() error { return errNotLinux }
