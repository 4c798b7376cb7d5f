// Package dirwatch tells which regular files were written, moved or linked
// into a bounded set of directories, with inotify, so that a file can be
// acted on before anything executes it. Events are coalesced per file: a
// file written many times while the consumer was busy is one Change. Lost
// events (the kernel's queue overflowing, or more files waiting than the
// watcher holds) are counted and reported as a Change of their own, never
// silently.
package dirwatch

import (
	"errors"

	"github.com/bpfcol/bpfcol/internal/safefs"
)

// ErrClosed is returned by Next once the Watcher is closed.
var ErrClosed = errors.New("directory watcher closed")

// Change is a file that appeared in a watched directory or was rewritten
// there, or, with Lost set, the news that some were missed.
type Change struct {
	// Dir is the watched directory; open Name beneath it, which follows
	// no symlink.
	Dir *safefs.Dir
	// Name is the file's name in Dir.
	Name string
	// Written: the file was closed after writing or moved in, so its
	// content is complete. Otherwise it was only created: a hard link, or
	// a file still being written, which a Written change follows.
	Written bool
	// Lost: events were lost (see Stats); Dir and Name are unset.
	Lost bool

	wd int32 // the directory's watch
}

// Stats are a Watcher's counts since New.
type Stats struct {
	// Overflows counts the kernel's event queue overflowing
	// (IN_Q_OVERFLOW): files written meanwhile were not told of.
	Overflows uint64
	// Dropped counts files not told of because MaxPending files were
	// waiting already.
	Dropped uint64
	// Coalesced counts events merged into a Change already waiting.
	Coalesced uint64
	// DirsGone counts watched directories removed or unmounted.
	DirsGone uint64
}

// Options bound a Watcher.
type Options struct {
	// MaxDirs bounds the directories watched; New refuses more.
	MaxDirs int
	// MaxPending bounds the files waiting for Next; more are dropped and
	// counted.
	MaxPending int
}
