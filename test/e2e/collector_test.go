package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the repository root, two levels above this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// collectorBinary returns bin/bpfcol, which `make build` produces.
func collectorBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(repoRoot(t), "bin", "bpfcol")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make build` first (make test does): %v", bin, err)
	}
	return bin
}

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runningCollector is bin/bpfcol started with a config.
type runningCollector struct {
	cmd     *exec.Cmd
	output  *lockedBuffer
	started time.Time
	done    chan error
}

// startCollector writes config to a file and runs bin/bpfcol with it. The
// collector is stopped with SIGTERM at cleanup, and must exit cleanly.
func startCollector(t testing.TB, config string) *runningCollector {
	t.Helper()
	bin := collectorBinary(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &runningCollector{output: &lockedBuffer{}, done: make(chan error, 1)}
	c.cmd = exec.Command(bin, "--config", cfgPath)
	c.cmd.Stdout = c.output
	c.cmd.Stderr = c.output
	c.started = time.Now()
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("collector did not stop cleanly: %v\n%s", err, c.output)
		}
	})
	return c
}

// stop sends SIGTERM and waits for the collector to exit.
func (c *runningCollector) stop() error {
	if c.cmd.ProcessState != nil {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		return fmt.Errorf("still running 30s after SIGTERM")
	}
}

// exited reports whether the collector has exited, and how.
func (c *runningCollector) exited() (bool, error) {
	select {
	case err := <-c.done:
		c.done <- err
		return true, err
	default:
		return false, nil
	}
}
