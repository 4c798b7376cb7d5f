//go:build linux

package negcache

import (
	"os"
	"syscall"
	"time"
)

// FileOf returns the identity of fi, which must come from a stat call. ok is
// false otherwise.
func FileOf(fi os.FileInfo) (File, bool) {
	if fi == nil {
		return File{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return File{}, false
	}
	return File{
		Key:     Key{Dev: uint64(st.Dev), Ino: uint64(st.Ino)},
		Size:    st.Size,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
	}, true
}
