package perfmap

import (
	"fmt"
	"io"

	"github.com/bpfcol/bpfcol/internal/process"
)

// openPerfMap opens /tmp/perf-NSPID.map inside pid's root, where NSPID is
// the pid as the process itself sees it. No symlink is followed, and
// only a regular file is opened.
// It also returns the process's start time, which tells a reused pid apart.
func openPerfMap(pid int) (io.ReadSeekCloser, string, error) {
	start, err := process.StartTime(pid)
	if err != nil {
		return nil, "", err
	}
	nspid, err := process.NamespacePID(pid)
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
