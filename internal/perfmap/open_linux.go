package perfmap

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/bpfcol/bpfcol/internal/process"
)

// openPerfMap opens /tmp/perf-NSPID.map inside pid's root, where NSPID is
// the pid as the process itself sees it. No symlink is followed, and
// only a regular file is opened.
// It also returns the process's start time, which tells a reused pid apart.
func openPerfMap(pid int) (io.ReadSeekCloser, string, error) {
	proc := "/proc/" + strconv.Itoa(pid)
	nspid, start, err := readStatus(proc)
	if err != nil {
		return nil, "", err
	}
	// /tmp is world-writable: a symlink there could lead to a file only
	// we may read, so none is followed.
	path := fmt.Sprintf("/tmp/perf-%d.map", nspid)
	f, err := process.OpenInRootNoSymlinks(pid, path)
	if err != nil {
		return nil, "", fmt.Errorf("opening perf map of pid %d: %w", pid, err)
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
