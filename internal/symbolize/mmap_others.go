//go:build !unix

package symbolize

import "os"

// mapFile maps nothing where mmap is not available: tables are then read
// through section reads.
func mapFile(*os.File) ([]byte, error) { return nil, nil }

func unmapFile([]byte) error { return nil }

func dropPages([]byte) {}
