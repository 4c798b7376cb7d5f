//go:build !unix

package symbolize

import (
	"errors"
	"os"
)

// mapFile maps nothing where mmap is not available: tables are then read
// through section reads.
func mapFile(*os.File) ([]byte, error) { return nil, nil }

func mapFileShared(*os.File, int64) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmapFile([]byte) error { return nil }

func dropPages([]byte) {}

func anonMap(int) ([]byte, error) { return nil, errors.ErrUnsupported }

func anonUnmap([]byte) {}
