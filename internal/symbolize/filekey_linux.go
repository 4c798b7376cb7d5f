//go:build linux

package symbolize

import (
	"os"
	"syscall"
)

// FileKeyOf returns the device and inode of fi. ok is false when fi does not
// come from a stat call.
func FileKeyOf(fi os.FileInfo) (FileKey, bool) {
	if fi == nil {
		return FileKey{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return FileKey{}, false
	}
	return FileKey{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, true
}
