//go:build !linux

package procwatch

import (
	"errors"

	"github.com/bpfcol/bpfcol/internal/bpf/ringrec"
)

// ErrClosed is returned by Read once the Watcher is closed.
var ErrClosed = ringrec.ErrClosed

var errNotLinux = errors.New("process events need linux")

// Watcher reports process events. It exists only on linux.
type Watcher struct{}

// New fails: process events need linux.
func New() (*Watcher, error) { return nil, errNotLinux }

// Read fails: process events need linux.
func (*Watcher) Read(*Event) error { return errNotLinux }

// Counters fails: process events need linux.
func (*Watcher) Counters() (Counters, error) { return Counters{}, errNotLinux }

// Close does nothing.
func (*Watcher) Close() error { return nil }
