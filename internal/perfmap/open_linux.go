package perfmap

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openPerfMap opens /tmp/perf-NSPID.map inside pid's root, where NSPID is
// the pid as the process itself sees it. No symlink leads out of the root.
// It also returns the process's start time, which tells a reused pid apart.
func openPerfMap(pid int) (io.ReadSeekCloser, string, error) {
	proc := "/proc/" + strconv.Itoa(pid)
	nspid, start, err := readStatus(proc)
	if err != nil {
		return nil, "", err
	}
	root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("opening root of pid %d: %w", pid, err)
	}
	defer unix.Close(root)
	path := fmt.Sprintf("/tmp/perf-%d.map", nspid)
	fd, err := unix.Openat2(root, path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return nil, "", fmt.Errorf("opening %s of pid %d: %w", path, pid, err)
	}
	f := os.NewFile(uintptr(fd), proc+"/root"+path)
	// Only a regular file: a FIFO or device would block or never end.
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, "", fmt.Errorf("opening %s of pid %d: not a regular file", path, pid)
	}
	return f, start, nil
}

// readStatus returns the innermost NSpid of the process and its start time.
func readStatus(proc string) (int, string, error) {
	stat, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return 0, "", fmt.Errorf("reading %s/stat: %w", proc, err)
	}
	i := bytes.LastIndexByte(stat, ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 20 {
		return 0, "", fmt.Errorf("parsing %s/stat", proc)
	}
	f, err := os.Open(proc + "/status")
	if err != nil {
		return 0, "", fmt.Errorf("reading %s/status: %w", proc, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			ids := strings.Fields(rest)
			if len(ids) == 0 {
				break
			}
			n, err := strconv.Atoi(ids[len(ids)-1])
			if err != nil {
				return 0, "", fmt.Errorf("parsing NSpid of %s: %w", proc, err)
			}
			return n, fields[19], nil
		}
	}
	return 0, "", fmt.Errorf("no NSpid in %s/status", proc)
}
