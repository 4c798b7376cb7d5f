package process

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// OpenMapping opens the file behind a file mapping of pid. It tries
// /proc/PID/map_files first, which works for deleted files and across mount
// namespaces, then the path inside the process's root, resolved so that no
// symlink can lead out of that root.
func OpenMapping(pid int, m *Mapping) (*os.File, error) {
	if !m.File() {
		return nil, fmt.Errorf("opening mapping %x-%x of pid %d: not a file mapping", m.Start, m.End, pid)
	}
	proc := "/proc/" + strconv.Itoa(pid)
	f, errMapFiles := os.Open(fmt.Sprintf("%s/map_files/%x-%x", proc, m.Start, m.End))
	if errMapFiles == nil {
		return f, nil
	}
	f, errRoot := openInRoot(proc+"/root", m.Path)
	if errRoot == nil {
		return f, nil
	}
	return nil, fmt.Errorf("opening %s of pid %d: %w", m.Path, pid, errors.Join(errMapFiles, errRoot))
}

func openInRoot(root, path string) (*os.File, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: root + path, Err: err}
	}
	return os.NewFile(uintptr(fd), root+path), nil
}
