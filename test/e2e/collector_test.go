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

// runningCollector is bin/bpfcol started with a config, or another
// profiler the tests run beside it.
type runningCollector struct {
	cmd     *exec.Cmd
	output  *lockedBuffer
	started time.Time
	done    chan error
	// stopSignal asks it to shut down.
	stopSignal syscall.Signal
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
	return startRunning(t, exec.Command(bin, "--config", cfgPath), syscall.SIGTERM)
}

// startRunning starts cmd, keeping its output. At cleanup it is sent
// stopSignal and must exit cleanly.
func startRunning(t testing.TB, cmd *exec.Cmd, stopSignal syscall.Signal) *runningCollector {
	t.Helper()
	c := &runningCollector{cmd: cmd, output: &lockedBuffer{}, done: make(chan error, 1), stopSignal: stopSignal}
	c.cmd.Stdout = c.output
	c.cmd.Stderr = c.output
	c.started = time.Now()
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("%s did not stop cleanly: %v\n%s", cmd.Path, err, c.output)
		}
	})
	return c
}

// stop sends stopSignal and waits for the process to exit.
func (c *runningCollector) stop() error {
	if c.cmd.ProcessState != nil {
		return nil
	}
	_ = c.cmd.Process.Signal(c.stopSignal)
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		return fmt.Errorf("still running 30s after %s", c.stopSignal)
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
