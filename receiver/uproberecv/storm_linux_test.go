package uproberecv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

// runStorm spawns bin n times, stormBatch at a time, each living lifeMs, from
// a shell so the spawning itself costs this process nothing.
func runStorm(t testing.TB, bin string, n, lifeMs int) {
	t.Helper()
	script := fmt.Sprintf(`for i in $(seq %d); do "$0" %d & if [ $((i %% %d)) -eq 0 ]; then wait; fi; done; wait`, n, lifeMs, stormBatch)
	if out, err := exec.Command("/bin/sh", "-c", script, bin).CombinedOutput(); err != nil {
		t.Fatalf("storm: %v\n%s", err, out)
	}
}

const stormBatch = 100

// stormBinaries builds the storm's stripped binary without the symbol and
// the replacement with it.
func stormBinaries(t testing.TB) (stripped, withScope string) {
	return testworkload.BuildC(t, "stormnop.c", "-O2", "-s"),
		testworkload.BuildC(t, "stormnop.c", "-O2", "-DWITH_SCOPE")
}

// TestExecStormParsesOnce spawns a stripped binary without the symbol 1000
// times: its ELF is parsed once. Replaced in place by a build with the
// symbol, it is evaluated again and attached.
func TestExecStormParsesOnce(t *testing.T) {
	bin, replacement := stormBinaries(t)
	cfg := &Config{Probes: []ProbeConfig{{ID: "storm", Binary: bin, Entry: "storm_scope", Exit: "return"}}}
	r, sink := startReceiver(t, cfg, options{})
	st := &r.tracker.stats

	const spawns = 1000
	runStorm(t, bin, spawns, 100)
	// Wait for the tracker to have looked at every spawn.
	waitFor(10*time.Second, func() bool { return st.negativeHits.Load()+st.evaluations.Load() >= spawns })
	t.Logf("%d spawns: %d scans, %d ELF evaluations, %d negative cache hits",
		spawns, st.scans.Load(), st.evaluations.Load(), st.negativeHits.Load())
	if st.evaluations.Load() != 1 {
		t.Fatalf("the binary was parsed %d times for %d spawns, want once", st.evaluations.Load(), spawns)
	}
	if hits := st.negativeHits.Load(); hits < spawns*9/10 {
		t.Fatalf("only %d of %d spawns were answered by the negative cache", hits, spawns)
	}

	// Replace in place: same inode, new size and mtime.
	data, err := os.ReadFile(replacement)
	if err != nil {
		t.Fatal(err)
	}
	before := keyOf(t, bin)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if keyOf(t, bin) != before {
		t.Fatal("the replacement changed the inode")
	}
	cmd := testworkload.Start(t, bin, "300")
	if !waitFor(2*time.Second, func() bool { return st.evaluations.Load() == 2 }) {
		t.Fatalf("replaced binary not evaluated again: %d evaluations", st.evaluations.Load())
	}
	if !waitFor(2*time.Second, func() bool { return r.tracker.isAttached(before) }) {
		t.Fatal("replaced binary evaluated again but not attached")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	// That process calls storm_scope 300 ms after its exec, which on a busy
	// host can come before the attach (the storm's events still being
	// read): a process started now, after the attach, is covered from its
	// first instruction, and its call must be recorded.
	cmd = testworkload.Start(t, bin, "0")
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	pid := int64(cmd.Process.Pid)
	if !waitFor(3*time.Second, func() bool {
		for _, l := range flatten(sink) {
			if l.pid == pid && l.probe == "storm" {
				return true
			}
		}
		return false
	}) {
		t.Fatal("no record from the replaced binary")
	}
}

// TestMissingSymbolLoggedOncePerBinary spawns a binary without the probe's
// symbol many times: the miss is logged once, at info level, not per
// process.
func TestMissingSymbolLoggedOncePerBinary(t *testing.T) {
	testenv.RequireBPF(t)
	bin, _ := stormBinaries(t)
	cfg := &Config{Probes: []ProbeConfig{{ID: "storm", Binary: bin, Entry: "storm_scope", Exit: "return"}}}
	core, logs := observer.New(zapcore.DebugLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	r, err := newLogsReceiver(set, cfg, new(consumertest.LogsSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context(), componentHost{}); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	st := &r.tracker.stats
	const spawns = 50
	runStorm(t, bin, spawns, 300)
	if !waitFor(10*time.Second, func() bool { return st.evaluations.Load()+st.negativeHits.Load() >= spawns }) {
		t.Fatalf("only %d of %d spawns looked at", st.evaluations.Load()+st.negativeHits.Load(), spawns)
	}
	var misses []observer.LoggedEntry
	for _, e := range logs.All() {
		if e.ContextMap()["path"] == bin && e.Level >= zapcore.InfoLevel && strings.Contains(e.Message, "nothing") {
			misses = append(misses, e)
		}
	}
	if len(misses) != 1 || misses[0].Level != zapcore.InfoLevel {
		t.Fatalf("%d spawns logged %d misses, want one at info level: %+v", spawns, len(misses), misses)
	}
	t.Logf("logged once: %s %v", misses[0].Message, misses[0].ContextMap())
}
