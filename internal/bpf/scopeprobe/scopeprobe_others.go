//go:build !linux || !(amd64 || arm64)

package scopeprobe

import (
	"errors"
	"time"

	"github.com/cilium/ebpf"
)

var errNotLinux = errors.New("uprobes need linux on amd64 or arm64")

// Probes are the loaded scope programs. They exist only on linux on amd64 or arm64.
type Probes struct{}

// Attachment is the set of uprobes put on one binary.
type Attachment struct{}

// CheckSupport reports that uprobes need linux on amd64 or arm64.
func CheckSupport() error { return errNotLinux }

// New fails: uprobes need linux on amd64 or arm64.
func New(Options) (*Probes, error) { return nil, errNotLinux }

// Attach fails: uprobes need linux on amd64 or arm64.
func (*Probes) Attach(string, []Site) (*Attachment, error) { return nil, errNotLinux }

// SetDeadline does nothing.
func (*Probes) SetDeadline(time.Time) {}

// Flush does nothing.
func (*Probes) Flush() error { return nil }

// Read fails: uprobes need linux on amd64 or arm64.
func (*Probes) Read(*Record) error { return errNotLinux }

// Counters fails: uprobes need linux on amd64 or arm64.
func (*Probes) Counters() (Counters, error) { return Counters{}, errNotLinux }

// Fill fails: uprobes need linux on amd64 or arm64.
func (*Probes) Fill(uint32, uint32) error { return errNotLinux }

// Prepare fails: uprobes need linux on amd64 or arm64.
func (*Probes) Prepare(uint32, bool, bool) error { return errNotLinux }

// ProgramIDs fails: uprobes need linux on amd64 or arm64.
func (*Probes) ProgramIDs() ([]ebpf.ProgramID, error) { return nil, errNotLinux }

// Close does nothing.
func (*Probes) Close() error { return nil }

// Links is zero.
func (*Attachment) Links() int { return 0 }

// Multi reports whether the sites went into uprobe_multi links.
func (*Attachment) Multi() bool { return false }

// Close does nothing.
func (*Attachment) Close() error { return nil }

// Warmer keeps uprobe registration fast. It exists only on linux on amd64 or arm64.
type Warmer struct{}

// WarmerStats count what a Warmer did.
type WarmerStats struct{ Writes, Skipped, Errors uint64 }

// StartWarmer fails: uprobes need linux on amd64 or arm64.
func (*Probes) StartWarmer(time.Duration, int) (*Warmer, error) { return nil, errNotLinux }

// Stats is zero.
func (*Warmer) Stats() WarmerStats { return WarmerStats{} }

// Close does nothing.
func (*Warmer) Close() error { return nil }

// ExpediteStats count what expediting registrations did.
type ExpediteStats struct {
	Raised, AlreadySet, Errors uint64
	SetFor                     time.Duration
}

// ExpediteStats returns zero: uprobes need linux on amd64 or arm64.
func (*Probes) ExpediteStats() ExpediteStats { return ExpediteStats{} }
