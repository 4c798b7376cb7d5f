//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"os"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

func readRCUExpedited(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(rcuExpeditedPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestExpediterSetsKnobWhileActive: the knob is set from the first begin to
// the last end of overlapping registrations, and cleared after; a knob
// someone else set stays set.
func TestExpediterSetsKnobWhileActive(t *testing.T) {
	testenv.RequireBPF(t)
	before := readRCUExpedited(t)
	e, err := openExpediter()
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	e.begin()
	if got := readRCUExpedited(t); got != "1" {
		t.Errorf("knob %q during a registration, want 1", got)
	}
	e.begin()
	e.end()
	if got := readRCUExpedited(t); got != "1" {
		t.Errorf("knob %q while a second registration is still active, want 1", got)
	}
	e.end()
	if got := readRCUExpedited(t); got != before {
		t.Errorf("knob %q after the registrations, want %q as before", got, before)
	}
	st := e.stats()
	if before == "0" && (st.Raised != 1 || st.AlreadySet != 0) {
		t.Errorf("stats %+v: want one raise for two overlapping registrations", st)
	}
	if before != "0" && (st.Raised != 0 || st.AlreadySet != 1) {
		t.Errorf("knob was %q: stats %+v, want it left alone", before, st)
	}
	if st.Errors != 0 {
		t.Errorf("stats %+v: errors", st)
	}
	if (st.Raised > 0) != (st.SetFor > 0) {
		t.Errorf("stats %+v: the time set must be counted exactly when we set it", st)
	}
}

// TestExpediterSharedByProbes: two users (two receivers' probes) share the
// knob, so one's end does not clear it under the other's registration, and
// the knob stays open until both are closed.
func TestExpediterSharedByProbes(t *testing.T) {
	testenv.RequireBPF(t)
	before := readRCUExpedited(t)
	a, err := openExpediter()
	if err != nil {
		t.Fatal(err)
	}
	b, err := openExpediter()
	if err != nil {
		a.close()
		t.Fatal(err)
	}
	a.begin()
	b.begin()
	a.end()
	if got := readRCUExpedited(t); got != "1" {
		t.Errorf("knob %q while the other user's registration is active, want 1", got)
	}
	b.end()
	if got := readRCUExpedited(t); got != before {
		t.Errorf("knob %q after both registrations, want %q as before", got, before)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	// b still works after a closed.
	b.begin()
	if got := readRCUExpedited(t); got != "1" {
		t.Errorf("knob %q during a registration after the other user closed, want 1", got)
	}
	b.end()
	if err := b.close(); err != nil {
		t.Fatal(err)
	}
	if got := readRCUExpedited(t); got != before {
		t.Errorf("knob %q after both closed, want %q as before", got, before)
	}
	sa, sb := a.stats(), b.stats()
	if before == "0" && (sa.Raised != 1 || sb.Raised != 1 || sa.SetFor == 0 || sb.SetFor == 0) {
		t.Errorf("stats %+v and %+v: want one raise each, with its time charged to it", sa, sb)
	}
}
