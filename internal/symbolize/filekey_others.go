//go:build !linux

package symbolize

import "os"

// FileKeyOf always reports false outside Linux, where bpfcol does not profile.
func FileKeyOf(fi os.FileInfo) (FileKey, bool) {
	return FileKey{}, false
}
