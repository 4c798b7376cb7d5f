package process

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// procPath names a file of pid's /proc directory. Per-pid /proc paths are
// built here only (test/layering checks it): other packages ask this one.
func procPath(pid int, name string) string { return "/proc/" + strconv.Itoa(pid) + "/" + name }

// ReadMappings reads /proc/PID/maps.
func ReadMappings(pid int) ([]Mapping, error) {
	f, err := os.Open(procPath(pid, "maps"))
	if err != nil {
		return nil, fmt.Errorf("opening maps of pid %d: %w", pid, err)
	}
	defer f.Close()
	maps, err := ParseMappings(f)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return maps, nil
}

// ExecutablePath returns the path of the process's executable, as the
// process sees it.
func ExecutablePath(pid int) (string, error) {
	p, err := os.Readlink(procPath(pid, "exe"))
	if err != nil {
		return "", fmt.Errorf("reading executable of pid %d: %w", pid, err)
	}
	return strings.TrimSuffix(p, " (deleted)"), nil
}

// ContainerID returns the id of the container the process runs in, or ""
// when its cgroup names none.
func ContainerID(pid int) (string, error) {
	f, err := os.Open(procPath(pid, "cgroup"))
	if err != nil {
		return "", fmt.Errorf("opening cgroup of pid %d: %w", pid, err)
	}
	defer f.Close()
	return parseContainerID(f)
}

// containerIDPattern matches the 64-hex-digit id that docker, containerd,
// CRI-O and podman put in cgroup paths ("docker-<id>.scope",
// "cri-containerd-<id>.scope", "/docker/<id>", "crio-<id>", "libpod-<id>").
var containerIDPattern = regexp.MustCompile(`(?:^|[/\-:])([0-9a-f]{64})(?:\.scope)?$`)

func parseContainerID(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for dir := parts[2]; dir != "/" && dir != "." && dir != ""; dir = filepath.Dir(dir) {
			if m := containerIDPattern.FindStringSubmatch(filepath.Base(dir)); m != nil {
				return m[1], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading cgroup: %w", err)
	}
	return "", nil
}

// Running reports whether pid is a process that has not exited: neither
// gone nor a zombie waiting for its parent.
func Running(pid int) bool {
	fields, err := statFields(pid)
	if err != nil || len(fields) == 0 || fields[0] == "" {
		return false
	}
	switch fields[0][0] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}

// statFields returns the fields of /proc/PID/stat from the third, the
// state, on. They follow the command name, which is in parentheses and
// may hold anything, spaces and parentheses included.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		return nil, fmt.Errorf("reading stat of pid %d: %w", pid, err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("parsing stat of pid %d: no command name", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// ThreadIDs lists the threads of pid, from /proc/PID/task.
func ThreadIDs(pid int) ([]int, error) {
	entries, err := os.ReadDir(procPath(pid, "task"))
	if err != nil {
		return nil, fmt.Errorf("listing threads of pid %d: %w", pid, err)
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// WorkingDir returns the working directory of pid, as the process sees it.
func WorkingDir(pid int) (string, error) {
	p, err := os.Readlink(procPath(pid, "cwd"))
	if err != nil {
		return "", fmt.Errorf("reading working directory of pid %d: %w", pid, err)
	}
	return p, nil
}

// PathInRoot names the absolute path, as pid sees it, from our mount
// namespace: through /proc/PID/root. A name to stat or to give the kernel,
// not to open: a symlink on it may lead out of the process's root, which
// OpenInRoot refuses.
func PathInRoot(pid int, path string) string { return procPath(pid, "root") + path }

// StartTime returns when pid started (field 22 of /proc/PID/stat, in clock
// ticks since boot), as the text it reads: two processes with one pid and
// one start time are the same.
func StartTime(pid int) (string, error) {
	fields, err := statFields(pid)
	if err != nil {
		return "", err
	}
	if len(fields) < 20 {
		return "", fmt.Errorf("parsing stat of pid %d: %d fields after the command name", pid, len(fields))
	}
	return fields[19], nil
}

// NamespacePID returns pid as the process itself sees it: the innermost
// of the NSpid line of /proc/PID/status.
func NamespacePID(pid int) (int, error) {
	f, err := os.Open(procPath(pid, "status"))
	if err != nil {
		return 0, fmt.Errorf("reading status of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "NSpid:")
		if !ok {
			continue
		}
		ids := strings.Fields(rest)
		if len(ids) == 0 {
			break
		}
		n, err := strconv.Atoi(ids[len(ids)-1])
		if err != nil {
			return 0, fmt.Errorf("parsing NSpid of pid %d: %w", pid, err)
		}
		return n, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading status of pid %d: %w", pid, err)
	}
	return 0, fmt.Errorf("reading status of pid %d: no NSpid", pid)
}
