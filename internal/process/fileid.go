package process

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrOtherFile is the error of opening a mapping that now holds another
// file than the one expected.
var ErrOtherFile = errors.New("not the mapped file")

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

// KernelFileKey returns the FileKey of a file that the kernel names by its
// superblock's device, in the kernel's own encoding (major << 20 | minor,
// as BPF programs read s_dev), and its inode number.
func KernelFileKey(dev uint32, ino uint64) FileKey {
	return FileKey{Dev: mkdev(dev>>20, dev&(1<<20-1)), Ino: ino}
}

// KernelDev returns k's device in the kernel's own encoding, the inverse
// of KernelFileKey.
func (k FileKey) KernelDev() uint32 {
	major := uint32((k.Dev>>8)&0xfff) | uint32(k.Dev>>32)&^0xfff
	minor := uint32(k.Dev&0xff) | uint32(k.Dev>>12)&^0xff
	return major<<20 | minor&(1<<20-1)
}
