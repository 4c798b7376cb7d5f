package process

import (
	"fmt"
	"os"
	"time"
)

// FileKey names a file by device and inode number, never by path: paths
// differ between mount namespaces and can be replaced while a process runs.
// It is what /proc/PID/maps tells of a mapped file.
type FileKey struct {
	// Dev is the device in stat's st_dev encoding.
	Dev, Ino uint64
}

// FileID is a file's identity as stat(2) tells it: its FileKey, and the size
// and modification time that tell a file replaced in place, or an inode
// recycled for another file, from the one seen before.
type FileID struct {
	FileKey
	Size    int64
	ModTime time.Time
}

// Same reports whether id and other name the same file with the same size
// and modification time.
func (id FileID) Same(other FileID) bool {
	return id.FileKey == other.FileKey && id.Size == other.Size && id.ModTime.Equal(other.ModTime)
}

// Key returns the device and inode of the file behind the mapping.
func (m *Mapping) Key() FileKey { return FileKey{Dev: m.Dev, Ino: m.Inode} }

// StatFile returns the identity of the open file f.
func StatFile(f *os.File) (FileID, error) {
	fi, err := f.Stat()
	if err != nil {
		return FileID{}, fmt.Errorf("stating %s: %w", f.Name(), err)
	}
	id, ok := FileIDOf(fi)
	if !ok {
		return FileID{}, fmt.Errorf("stating %s: no device and inode", f.Name())
	}
	return id, nil
}
