package process

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/safefs"
)

// OpenMapping opens the file behind a file mapping of pid. It tries
// /proc/PID/map_files first, which works for deleted files and across mount
// namespaces, then the path inside the process's root, resolved so that no
// symlink can lead out of that root.
func OpenMapping(pid int, m *Mapping) (*os.File, error) {
	if !m.File() {
		return nil, fmt.Errorf("opening mapping %x-%x of pid %d: not a file mapping", m.Start, m.End, pid)
	}
	f, errMapFiles := os.Open(mapFilesPath(pid, m))
	if errMapFiles == nil {
		return f, nil
	}
	f, errRoot := OpenInRoot(pid, m.Path)
	if errRoot == nil {
		return f, nil
	}
	return nil, fmt.Errorf("opening %s of pid %d: %w", m.Path, pid, errors.Join(errMapFiles, errRoot))
}

// OpenMappedFile opens the file that pid maps at [start, end), through
// /proc/PID/map_files (deleted files and other mount namespaces included),
// and checks that it is the file key: the range may have been mapped again
// since it was seen. Anything but a regular file is refused.
func OpenMappedFile(pid int, start, end uint64, key FileKey) (*os.File, error) {
	name := mapFilesRange(pid, start, end)
	const flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	fd, err := unix.Open(name, flags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f, err := regularFile(fd, name)
	if err != nil {
		return nil, err
	}
	id, err := StatFile(f)
	if err == nil && id.FileKey != key {
		err = fmt.Errorf("opening %s: file %d:%d, not %d:%d: %w", name, id.Dev, id.Ino, key.Dev, key.Ino, ErrOtherFile)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// MappedFileName returns the path of the file behind mapping m of pid, as
// /proc/PID/map_files names it, " (deleted)" removed.
func MappedFileName(pid int, m *Mapping) (string, error) {
	p, err := os.Readlink(mapFilesPath(pid, m))
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(p, " (deleted)"), nil
}

// StatMapping returns the identity of the file behind a file mapping of pid,
// opened as OpenMapping does. It fails when the file found is not the one
// mapped (another device or inode: the path was replaced since).
func StatMapping(pid int, m *Mapping) (FileID, error) {
	f, err := OpenMapping(pid, m)
	if err != nil {
		return FileID{}, fmt.Errorf("stating mapped file: %w", err)
	}
	defer f.Close()
	id, err := StatFile(f)
	if err != nil {
		return FileID{}, fmt.Errorf("stating %s of pid %d: %w", m.Path, pid, err)
	}
	if id.FileKey != m.Key() {
		return FileID{}, fmt.Errorf("stating %s of pid %d: not the mapped file", m.Path, pid)
	}
	return id, nil
}

// MappedFilePath names the file behind a mapping of pid so that the kernel,
// resolving it from our mount namespace, reaches the same inode (for
// attaching uprobes by path): /proc/PID/map_files first, then the path
// under /proc/PID/root.
func MappedFilePath(pid int, m *Mapping) string {
	if p := mapFilesPath(pid, m); fileExists(p) {
		return p
	}
	return rootPath(pid) + m.Path
}

// OpenInRoot opens the regular file at path as the process pid sees it:
// resolved inside /proc/PID/root, so that neither ".." nor a symlink leads
// out of that root. A pid of 0 or less opens path in our own root. Anything
// but a regular file (a FIFO whose open would wait for a writer, a device)
// is refused with safefs.ErrNotRegular.
func OpenInRoot(pid int, path string) (*os.File, error) {
	return openInRoot(pid, path, 0)
}

// OpenInRootNoSymlinks is OpenInRoot refusing a symlink anywhere on the
// path (ELOOP): for files in world-writable directories such as /tmp,
// where any user could plant a link to a file only we may read.
func OpenInRootNoSymlinks(pid int, path string) (*os.File, error) {
	return openInRoot(pid, path, unix.RESOLVE_NO_SYMLINKS)
}

// openInRoot opens path in pid's root (ours for a pid of 0 or less),
// resolved with the extra RESOLVE_* flags.
func openInRoot(pid int, path string, resolve uint64) (*os.File, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	const flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	dir, name := unix.AT_FDCWD, path
	if pid > 0 {
		root := rootPath(pid)
		fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: root, Err: err}
		}
		defer unix.Close(fd)
		dir, name = fd, root+path
		resolve |= unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	}
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{Flags: flags, Resolve: resolve})
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: name, Err: err}
	}
	return regularFile(fd, name)
}

// regularFile returns fd as a blocking *os.File if it is a regular file,
// else closes it.
func regularFile(fd int, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: name, Err: safefs.ErrNotRegular}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func rootPath(pid int) string { return procPath(pid, "root") }

func mapFilesPath(pid int, m *Mapping) string { return mapFilesRange(pid, m.Start, m.End) }

func mapFilesRange(pid int, start, end uint64) string {
	return procPath(pid, fmt.Sprintf("map_files/%x-%x", start, end))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
