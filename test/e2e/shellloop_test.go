package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// shellLoop is `sh -c` running body over and over, in a process group of
// its own, and keeping the lines body prints (a child's pid, or one line
// per exec). At cleanup the whole group is killed: killing the shell alone
// would leave its current child running, holding the output pipe open.
// Each round first checks that the test process is alive, so a loop never
// outlives a test that was killed before its cleanup ran.
type shellLoop struct {
	cmd    *exec.Cmd
	stderr lockedBuffer

	mu    sync.Mutex
	lines []string
	part  []byte
}

// startShellLoop runs body in a loop with args as $1, $2, ...
func startShellLoop(tb testing.TB, body string, args ...string) *shellLoop {
	tb.Helper()
	script := fmt.Sprintf("while kill -0 %d 2>/dev/null; do %s; done", os.Getpid(), body)
	l := &shellLoop{}
	l.cmd = exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	l.cmd.Stdout, l.cmd.Stderr = l, &l.stderr
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := l.cmd.Start(); err != nil {
		tb.Fatalf("starting the loop %q: %v", body, err)
	}
	tb.Cleanup(func() {
		_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
		_ = l.cmd.Wait()
		if tb.Failed() && l.stderr.String() != "" {
			tb.Logf("stderr of the loop %q:\n%s", body, l.stderr.String())
		}
	})
	return l
}

func (l *shellLoop) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.lines = append(l.lines, string(l.part[:i]))
		l.part = l.part[i+1:]
	}
}

// count is how many lines the loop printed so far.
func (l *shellLoop) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// pids are the lines printed so far that are pids.
func (l *shellLoop) pids() map[int64]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	pids := map[int64]bool{}
	for _, line := range l.lines {
		if pid, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64); err == nil {
			pids[pid] = true
		}
	}
	return pids
}
