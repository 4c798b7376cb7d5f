package process

import (
	"os"
	"syscall"
	"time"
)

// FileIDOf returns the identity of fi, which must come from a stat call; ok
// is false otherwise.
func FileIDOf(fi os.FileInfo) (FileID, bool) {
	if fi == nil {
		return FileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return FileID{}, false
	}
	return FileID{
		FileKey: FileKey{Dev: uint64(st.Dev), Ino: uint64(st.Ino)},
		Size:    st.Size,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
	}, true
}
