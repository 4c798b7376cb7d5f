package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testdebuginfod"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// Build-ids given to the two workloads, with different NN directories.
const (
	linkedFileID = "aa11223344556677889900112233445566778899" // its .debug entry links to the canary
	linkedDirID  = "bb11223344556677889900112233445566778899" // its NN directory links outside the cache
)

// startTracedCollector runs bin/bpfcol under strace, with only keep in its
// capability sets (as startCollectorWithCaps), logging to log every open,
// creation and rename with the file each descriptor refers to (-y).
func startTracedCollector(t *testing.T, config, log string, keep []string) *runningCollector {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace (Debian package strace) is needed: %v", err)
	}
	var drop []string
	for _, c := range allCapabilities(t) {
		if !contains(keep, c) {
			drop = append(drop, c)
		}
	}
	bin := collectorBinary(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &runningCollector{output: &lockedBuffer{}, done: make(chan error, 1), stopSignal: syscall.SIGTERM}
	c.cmd = exec.Command(strace, "-f", "-y", "-qq", "-o", log,
		"-e", "trace=open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,link,linkat,unlink,unlinkat",
		"capsh", "--drop="+strings.Join(drop, ","), "--", "-c", fmt.Sprintf("exec %s --config %s", bin, cfgPath))
	c.cmd.Stdout, c.cmd.Stderr = c.output, c.output
	c.started = time.Now()
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		if stopTraced(c) != nil {
			_ = c.stop()
		}
	})
	return c
}

// stopTraced sends SIGTERM to the traced collector (strace itself would
// only detach) and waits for strace to exit with it.
func stopTraced(c *runningCollector) error {
	if done, err := c.exited(); done {
		return err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", c.cmd.Process.Pid, c.cmd.Process.Pid))
	if err != nil {
		return fmt.Errorf("finding the traced collector: %w", err)
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("still running 30s after SIGTERM")
	}
}

// stripped builds cpuhog with the given build-id, returns the full build
// (served by debuginfod) and a stripped copy (run and profiled).
func strippedHog(t *testing.T, serveDir, id string) string {
	t.Helper()
	full := testworkload.BuildC(t, "cpuhog.c", append(testworkload.CPUHogFlags(), "-Wl,--build-id=0x"+id)...)
	copyFile(t, full, filepath.Join(serveDir, "cpuhog-"+id[:2]), 0o755)
	stripped := filepath.Join(t.TempDir(), "cpuhog")
	if out, err := exec.Command("objcopy", "--strip-all", full, stripped).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	return stripped
}

// tracedLines returns the strace lines that mention dir.
func tracedLines(trace, dir string) []string {
	var hits []string
	for _, l := range strings.Split(trace, "\n") {
		if strings.Contains(l, dir) {
			hits = append(hits, l)
		}
	}
	return hits
}

// TestCacheLinksWithCapabilities: bin/bpfcol with only the documented
// capabilities, its debug cache holding links planted by someone who could
// write there (to a canary file, before the start; in place of a build-id
// directory, to a directory outside, while it runs), profiles stripped binaries whose debug files it
// fetches from a real debuginfod. It names their frames, and strace shows
// that it never opened the canary nor wrote outside the cache.
func TestCacheLinksWithCapabilities(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBPF(t)
	serveDir := t.TempDir()
	hogFile := strippedHog(t, serveDir, linkedFileID)
	hogDir := strippedHog(t, serveDir, linkedDirID)
	url := testdebuginfod.Start(t, serveDir, linkedFileID, linkedDirID)

	canaryDir, outside := t.TempDir(), t.TempDir()
	canary := filepath.Join(canaryDir, "canary.debug")
	copyFile(t, filepath.Join(serveDir, "cpuhog-aa"), canary, 0o600) // even a valid debug file is not to be used
	cache := filepath.Join(t.TempDir(), "cache")
	fileLink := filepath.Join(cache, ".build-id", linkedFileID[:2], linkedFileID[2:]+".debug")
	dirLink := filepath.Join(cache, ".build-id", linkedDirID[:2])
	if err := os.MkdirAll(filepath.Dir(fileLink), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(canary, fileLink); err != nil {
		t.Fatal(err)
	}

	// Control: strace shows an open through the planted link as the
	// canary, so its silence below means something.
	control := filepath.Join(t.TempDir(), "control.log")
	if out, err := exec.Command("strace", "-f", "-y", "-qq", "-o", control, "-e", "trace=openat", "cat", fileLink).CombinedOutput(); err != nil {
		t.Fatalf("strace control: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(control); len(tracedLines(string(b), canaryDir)) == 0 {
		t.Fatalf("control: strace did not show the canary opened through the link:\n%s", b)
	}

	server := startProfilesServer(t)
	cfg := strings.Replace(profilesConfig(server.addr), "report_interval: 1s", fmt.Sprintf(`report_interval: 1s
    symbolizer:
      cache_dir: %s
      debuginfod:
        urls: [%s]
        timeout: 30s`, cache, url), 1)
	log := filepath.Join(t.TempDir(), "strace.log")
	col := startTracedCollector(t, cfg, log, minimalCapabilities)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(col.output.String(), "Everything is ready") {
		if done, err := col.exited(); done {
			t.Fatalf("collector exited: %v\n%s", err, col.output)
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector not ready after 60s:\n%s", col.output)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Planted while bpfcol runs: met when the download is written.
	if err := os.Symlink(outside, dirLink); err != nil {
		t.Fatal(err)
	}
	// Only the debug file names the stripped binary's leaf function
	// (middle may be inlined; .dynsym has neither).
	chain := []string{"leaf"}
	for _, hog := range []string{hogFile, hogDir} {
		pid := int64(testworkload.Start(t, hog).Process.Pid)
		if ofPID, named := namedChain(server, pid, chain, true, 60*time.Second); named < 10 {
			t.Errorf("%s: %d of %d samples named %v: the debug file was not fetched into the cache", hog, named, ofPID, chain)
		}
	}
	if err := stopTraced(col); err != nil {
		t.Errorf("collector did not stop cleanly: %v\n%s", err, col.output)
	}
	if t.Failed() {
		t.Logf("collector output:\n%s", col.output)
	}

	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	trace := string(b)
	if !strings.Contains(trace, cache) {
		t.Fatalf("strace saw nothing of the cache: the trace does not cover bpfcol\n%s", col.output)
	}
	for _, dir := range []string{canaryDir, outside} {
		if hits := tracedLines(trace, dir); len(hits) != 0 {
			t.Errorf("bpfcol touched %s through a planted link:\n%s", dir, strings.Join(hits, "\n"))
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("written outside the cache: %v", ents)
	}
	for _, p := range []string{fileLink, filepath.Join(dirLink, linkedDirID[2:]+".debug")} {
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v, want the fetched debug file in place of the link", p, err)
		}
	}
	if fi, err := os.Lstat(dirLink); err != nil || !fi.IsDir() {
		t.Errorf("%s is not a directory: %v", dirLink, err)
	}
}
