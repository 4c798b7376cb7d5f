//go:build !linux

package process

import (
	"errors"
	"os"
)

var errNeedsLinux = errors.New("reading another process's files needs linux")

// OpenMapping needs /proc, which only linux has.
func OpenMapping(int, *Mapping) (*os.File, error) { return nil, errNeedsLinux }

// StatMapping needs /proc, which only linux has.
func StatMapping(int, *Mapping) (FileID, error) { return FileID{}, errNeedsLinux }

// MappedFilePath returns the mapping's path as the process sees it: without
// /proc there is nothing better.
func MappedFilePath(_ int, m *Mapping) string { return m.Path }

// OpenInRoot opens path in our own root: without /proc there is no other.
func OpenInRoot(_ int, path string) (*os.File, error) { return os.Open(path) }

// OpenInRootNoSymlinks needs openat2's RESOLVE_NO_SYMLINKS, which only
// linux has.
func OpenInRootNoSymlinks(int, string) (*os.File, error) { return nil, errNeedsLinux }

// OpenMappedFile needs /proc, which only linux has.
func OpenMappedFile(int, uint64, uint64, FileKey) (*os.File, error) { return nil, errNeedsLinux }

// MappedFileName needs /proc, which only linux has.
func MappedFileName(int, *Mapping) (string, error) { return "", errNeedsLinux }
