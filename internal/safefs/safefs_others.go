//go:build !linux

package safefs

import (
	"errors"
	"io/fs"
	"os"
)

var errUnsupported = errors.New("safefs needs Linux")

// Dir is an open directory beneath which paths are resolved.
type Dir struct{}

// OpenPrivate needs Linux.
func OpenPrivate(string) (*Dir, error) { return nil, errUnsupported }

// OpenTree needs Linux.
func OpenTree(string) (*Dir, error) { return nil, errUnsupported }

// OpenRoot needs Linux.
func OpenRoot(string) (*Dir, error) { return nil, errUnsupported }

// OpenNoLinks needs Linux.
func OpenNoLinks(string) (*Dir, error) { return nil, errUnsupported }

// ProcPath returns "".
func (*Dir) ProcPath() string { return "" }

// Name returns "".
func (*Dir) Name() string { return "" }

// Close does nothing.
func (*Dir) Close() error { return nil }

// Open needs Linux.
func (*Dir) Open(string) (*os.File, error) { return nil, errUnsupported }

// OpenFile needs Linux.
func (*Dir) OpenFile(string, int, fs.FileMode) (*os.File, error) { return nil, errUnsupported }

// Lstat needs Linux.
func (*Dir) Lstat(string) (Info, error) { return Info{}, errUnsupported }

// Mkdir needs Linux.
func (*Dir) Mkdir(string, fs.FileMode) error { return errUnsupported }

// CreateTemp needs Linux.
func (*Dir) CreateTemp(string, string) (*os.File, string, error) { return nil, "", errUnsupported }

// Rename needs Linux.
func (*Dir) Rename(string, string) error { return errUnsupported }

// Remove needs Linux.
func (*Dir) Remove(string) error { return errUnsupported }

// ReadDir needs Linux.
func (*Dir) ReadDir(string) ([]string, error) { return nil, errUnsupported }

// ReadNames needs Linux.
func (*Dir) ReadNames(int) ([]string, bool, error) { return nil, false, errUnsupported }

// Touch needs Linux.
func Touch(*os.File) error { return errUnsupported }

// Owner needs Linux.
func Owner(*os.File) (uint32, bool, error) { return 0, false, errUnsupported }
