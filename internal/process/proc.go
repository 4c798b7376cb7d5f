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

// ReadMappings reads /proc/PID/maps.
func ReadMappings(pid int) ([]Mapping, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
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
	p, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return "", fmt.Errorf("reading executable of pid %d: %w", pid, err)
	}
	return strings.TrimSuffix(p, " (deleted)"), nil
}

// ContainerID returns the id of the container the process runs in, or ""
// when its cgroup names none.
func ContainerID(pid int) (string, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
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
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// hold anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	switch b[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}
