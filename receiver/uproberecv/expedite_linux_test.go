package uproberecv

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestExpediteAttachAfterExec: with expedite_attach, a binary first seen
// after start is attached from its exec, rcu_expedited was raised for that
// attach (when it was clear) and is what it was before once the receiver
// has attached and once it has stopped.
func TestExpediteAttachAfterExec(t *testing.T) {
	testenv.RequireBPF(t)
	short := testworkload.BuildC(t, "shortcalls.c", "-O2", "-g")
	before, err := os.ReadFile("/sys/kernel/rcu_expedited")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := &Config{
		Probes:         []ProbeConfig{{ID: "x", FileMatch: "^" + regexp.QuoteMeta(dir) + "/", Entry: "short_call", Exit: "return"}},
		Retain:         RetainConfig{MaxBinaries: 8, MaxAge: time.Hour},
		ExpediteAttach: true,
	}
	// Runs after the receiver's own cleanup, which stops it.
	t.Cleanup(func() {
		if after, _ := os.ReadFile("/sys/kernel/rcu_expedited"); string(after) != string(before) {
			t.Errorf("rcu_expedited %q after the receiver stopped, was %q", after, before)
		}
	})
	r, _ := startReceiver(t, cfg, options{})
	bin := filepath.Join(dir, "new")
	copyFileTB(t, short, bin)
	if out, err := exec.Command(bin, "1").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	key := keyOf(t, bin)
	if !waitFor(5*time.Second, func() bool { n, _ := r.tracker.attachedCount(key); return n > 0 }) {
		t.Fatalf("%s not attached", bin)
	}
	st := r.probes.ExpediteStats()
	t.Logf("expedite stats after the attach: %+v", st)
	if st.Errors != 0 || st.Raised+st.AlreadySet == 0 {
		t.Errorf("stats %+v: want the attach expedited without errors", st)
	}
	if string(before) == "0\n" && st.Raised == 0 {
		t.Errorf("stats %+v: rcu_expedited was clear but never raised", st)
	}
	if after, _ := os.ReadFile("/sys/kernel/rcu_expedited"); string(after) != string(before) {
		t.Errorf("rcu_expedited %q after the attach, was %q", after, before)
	}
}
