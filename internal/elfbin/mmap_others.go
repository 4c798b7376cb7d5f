//go:build !unix

package elfbin

import (
	"errors"
	"os"
)

// MaxMappedFile bounds the size of a file mapped.
const MaxMappedFile = 1 << 40

// Map maps nothing where mmap is not available: sections are then read
// through the file.
func Map(*os.File) ([]byte, error) { return nil, nil }

// MapShared is not available without mmap.
func MapShared(*os.File, int64) ([]byte, error) { return nil, errors.ErrUnsupported }

// Unmap has nothing to unmap without mmap.
func Unmap([]byte) error { return nil }

// DropPages has no pages to drop without mmap.
func DropPages([]byte) {}
