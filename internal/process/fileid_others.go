//go:build !linux

package process

import "os"

// FileIDOf always reports false outside Linux, where device and inode are
// not read.
func FileIDOf(os.FileInfo) (FileID, bool) { return FileID{}, false }

// Links always returns 0 outside Linux.
func Links(os.FileInfo) uint64 { return 0 }
