// Package safefs resolves paths beneath an open directory without letting
// anyone who can write inside it redirect bpfcol elsewhere.
//
// Every path is resolved by the kernel relative to the directory's file
// descriptor with openat2 (RESOLVE_BENEATH, and RESOLVE_NO_SYMLINKS for a
// Private directory). On kernels without openat2 each component is opened
// with O_NOFOLLOW, which refuses every symlink. Creation, renames and
// removals go through the descriptor of the parent directory (mkdirat,
// renameat, unlinkat), so a symlinked directory is never written through.
package safefs

import (
	"errors"
	"io/fs"
	"time"
)

// Errors callers can tell apart.
var (
	// ErrNotRegular means a path names something other than a regular
	// file: a directory, FIFO, device or socket.
	ErrNotRegular = errors.New("not a regular file")
	// ErrSymlink means resolution met a symbolic link that the directory's
	// rules refuse, or one leading outside the directory.
	ErrSymlink = errors.New("symbolic link refused")
	// ErrUnsafeRoot means a Private directory is not owned by this user or
	// can be written by others.
	ErrUnsafeRoot = errors.New("directory is not private")
	// ErrBadPath means a relative path is absolute, empty or has "..".
	ErrBadPath = errors.New("path is not a plain relative path")
)

// Kind says how paths beneath a Dir may be resolved.
type Kind int

const (
	// Private is a directory bpfcol owns (the debug cache): no symlink is
	// followed anywhere beneath it.
	Private Kind = iota
	// Tree is a directory someone else maintains (/usr/lib/debug, a
	// debug_directories entry): symlinks are followed only while they stay
	// beneath it.
	Tree
	// Root is a process's root directory (/proc/PID/root): absolute
	// symlinks resolve against it, as they would for the process, and
	// never escape it.
	Root
	// NoLinks is a directory someone else maintains whose files bpfcol
	// acts on (a directory a probe watches): no symlink is followed
	// beneath it, since one would let whoever writes there point bpfcol at
	// any file.
	NoLinks
)

// Info is what Lstat reports about one entry.
type Info struct {
	Mode    fs.FileMode
	UID     uint32
	Size    int64
	ModTime time.Time
}
