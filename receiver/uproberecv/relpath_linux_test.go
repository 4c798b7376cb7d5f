package uproberecv

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestRelativeExecDescribed runs a short binary as ./shortcalls from a
// shell whose working directory holds it, the way a user starts a program
// they just built. The tracker is kept busy (its lock held) until every
// run has exited, as a host with many execs does: the exec events carry
// the relative path, and /proc of those processes is gone when they are
// handled. Every record must still carry process.executable.path and
// .name, from the path joined to the parent's working directory.
func TestRelativeExecDescribed(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "shortcalls")
	copyFile(t, testworkload.BuildC(t, "shortcalls.c", "-O2", "-g"), bin)
	cfg := &Config{
		Probes: []ProbeConfig{{ID: "short", Binary: bin, Entry: "short_call", Exit: "return"}},
		Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour},
		// Records wait one batch for their process's exec event: long
		// enough for the events queued behind the held lock.
		Batch: BatchConfig{MaxRecords: 4096, Timeout: 2 * time.Second},
	}
	r, sink := startReceiver(t, cfg, options{})
	const runs, calls = 20, 5
	sh := exec.Command("sh", "-c", `for i in $(seq `+strconv.Itoa(runs)+`); do ./shortcalls `+strconv.Itoa(calls)+` >/dev/null; done; echo done; read x`)
	sh.Dir = dir
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.tracker.mu.Lock()
	if err := sh.Start(); err != nil {
		r.tracker.mu.Unlock()
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	r.tracker.mu.Unlock()
	defer func() { stdin.Close(); sh.Wait() }()
	if strings.TrimSpace(line) != "done" {
		t.Fatalf("the shell said %q", line)
	}
	var recs []scopeLog
	waitFor(15*time.Second, func() bool {
		recs = flatten(sink)
		return len(recs) >= runs*calls
	})
	pids := map[int64]bool{}
	undescribed := 0
	for _, rec := range recs {
		pids[rec.pid] = true
		if rec.exePath != bin || rec.exeName != "shortcalls" {
			undescribed++
		}
	}
	t.Logf("%d records of %d runs (%d calls each); %d without the executable's path and name; %d exec paths unresolved",
		len(recs), len(pids), calls, undescribed, r.tracker.stats.execPathsUnresolved.Load())
	if len(recs) != runs*calls || len(pids) != runs {
		t.Errorf("%d records of %d processes, want %d of %d", len(recs), len(pids), runs*calls, runs)
	}
	if undescribed != 0 {
		t.Errorf("%d of %d records lack process.executable.path %s or .name", undescribed, len(recs), bin)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatal(err)
	}
}
