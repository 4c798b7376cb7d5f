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

// Links returns the number of hard links of the file fi describes, which
// must come from a stat call; 0 when unknown.
func Links(fi os.FileInfo) uint64 {
	if fi == nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st != nil {
		return uint64(st.Nlink)
	}
	return 0
}
