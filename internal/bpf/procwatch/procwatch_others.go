//go:build !linux || !(amd64 || arm64)

package procwatch

import (
	"errors"

	"github.com/bpfcol/bpfcol/internal/bpf/ringrec"
)

// ErrClosed is returned by Read once the Watcher is closed.
var ErrClosed = ringrec.ErrClosed

var errNotLinux = errors.New("process events need linux on amd64 or arm64")

// Watcher reports process events. It exists only on linux on amd64 or arm64.
type Watcher struct{}

// New fails: process events need Linux.
func New(Options) (*Watcher, error) { return nil, errNotLinux }

// Mappings returns MappingsNone.
func (*Watcher) Mappings() MappingSource { return MappingsNone }

// MappingsError returns why mappings are not watched.
func (*Watcher) MappingsError() error { return errNotLinux }

// Read fails: process events need linux on amd64 or arm64.
func (*Watcher) Read(*Event) error { return errNotLinux }

// Counters fails: process events need linux on amd64 or arm64.
func (*Watcher) Counters() (Counters, error) { return Counters{}, errNotLinux }

// Close does nothing.
func (*Watcher) Close() error { return nil }
