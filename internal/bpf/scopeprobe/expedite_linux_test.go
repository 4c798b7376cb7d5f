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
