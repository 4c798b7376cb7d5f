//go:build linux && (amd64 || arm64)

package scopeprobe_test

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestWarmer runs the warmer for a while: it registers and unregisters
// without an error, and leaves no uprobe_multi link behind once closed.
func TestWarmer(t *testing.T) {
	testenv.RequireBPF(t)
	testenv.Kernel(t, testenv.UprobeMulti, features.HaveBPFLinkUprobeMulti())
	p, err := scopeprobe.New(scopeprobe.Options{Settings: []scopeprobe.Setting{{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids, err := p.ProgramIDs()
	if err != nil {
		t.Fatal(err)
	}
	w, err := p.StartWarmer(2*time.Millisecond, 8)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := linksTo(t, ids); n > 8+1 {
		t.Errorf("%d links while warming, want at most one held and 8 closing", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	st := w.Stats()
	t.Logf("200 ms of warming: %+v", st)
	if st.Writes < 2 || st.Errors != 0 {
		t.Errorf("stats %+v: want registrations and unregistrations without errors", st)
	}
	if n := linksTo(t, ids); n != 0 {
		t.Errorf("%d links left after Close", n)
	}
}

// TestWarmerOptions refuses a period or closer bound that is not positive.
func TestWarmerOptions(t *testing.T) {
	testenv.RequireBPF(t)
	p, err := scopeprobe.New(scopeprobe.Options{Settings: []scopeprobe.Setting{{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, c := range []struct {
		period  time.Duration
		closers int
	}{{0, 1}, {time.Millisecond, 0}} {
		if w, err := p.StartWarmer(c.period, c.closers); err == nil {
			w.Close()
			t.Errorf("period %s, closers %d: no error", c.period, c.closers)
		}
	}
}

// linksTo counts the BPF links in the kernel whose program is one of ids.
func linksTo(t *testing.T, ids []ebpf.ProgramID) int {
	t.Helper()
	want := map[ebpf.ProgramID]bool{}
	for _, id := range ids {
		want[id] = true
	}
	n := 0
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		if info, err := it.Link.Info(); err == nil && want[info.Program] {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
