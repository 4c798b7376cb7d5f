//go:build !linux

package dirwatch

import "errors"

// Watcher watches nothing outside Linux.
type Watcher struct{}

// New needs Linux (inotify).
func New([]string, Options) (*Watcher, []error, error) {
	return nil, nil, errors.New("watching directories needs Linux (inotify)")
}

// Next returns ErrClosed.
func (*Watcher) Next() (Change, error) { return Change{}, ErrClosed }

// Dirs returns nil.
func (*Watcher) Dirs() []string { return nil }

// Stats returns zero counts.
func (*Watcher) Stats() Stats { return Stats{} }

// Close does nothing.
func (*Watcher) Close() error { return nil }
