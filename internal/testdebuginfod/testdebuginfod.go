// Package testdebuginfod runs a real elfutils debuginfod server on
// 127.0.0.1 for tests, serving a directory of real debug files.
package testdebuginfod

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Start runs `debuginfod -F dir` on a free port of 127.0.0.1 with a private
// database, waits until it serves the debuginfo of every build-id in ids,
// and returns its URL. The server stops at test cleanup. A missing
// debuginfod fails the test (make test installs it).
func Start(t testing.TB, dir string, ids ...string) string {
	t.Helper()
	bin, err := exec.LookPath("debuginfod")
	if err != nil {
		t.Fatalf("debuginfod (Debian package debuginfod) is needed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-F", dir, "-p", strconv.Itoa(port),
		"-d", filepath.Join(t.TempDir(), "db.sqlite"), "-t", "1", "-g", "0")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("debuginfod output:\n%s", out.String())
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range ids {
		for {
			// The scan runs in the background: poll until it served id.
			resp, err := http.Get(url + "/buildid/" + id + "/debuginfo")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("debuginfod did not serve %s within 60s (last error: %v)", id, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return url
}
