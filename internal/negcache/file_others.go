//go:build !linux

package negcache

import "os"

// FileOf always reports false outside Linux, where device and inode are not
// read.
func FileOf(fi os.FileInfo) (File, bool) { return File{}, false }
