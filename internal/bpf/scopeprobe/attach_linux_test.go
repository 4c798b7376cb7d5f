//go:build linux && (amd64 || arm64)

package scopeprobe_test

import (
	"debug/elf"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf/features"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// sledSites returns n entry sites on the one-byte nops of the harness's
// nop_sled, by file offset.
func sledSites(t testing.TB, bin string, n int) []scopeprobe.Site {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var sled elf.Symbol
	for _, s := range syms {
		if s.Name == "nop_sled" {
			sled = s
		}
	}
	if sled.Size < uint64(n) {
		t.Fatalf("nop_sled has %d bytes, want %d nops", sled.Size, n)
	}
	var base uint64
	found := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && sled.Value >= p.Vaddr && sled.Value-p.Vaddr < p.Filesz {
			base, found = sled.Value-p.Vaddr+p.Off, true
		}
	}
	if !found {
		t.Fatal("nop_sled is in no executable segment")
	}
	sites := make([]scopeprobe.Site, n)
	for i := range sites {
		sites[i] = scopeprobe.Site{Kind: scopeprobe.Entry, Offset: base + uint64(i), Symbol: "nop_sled"}
	}
	return sites
}

// BenchmarkAttach1000 attaches and detaches 1,000 uprobes on one binary,
// with one uprobe_multi link and with one perf-event uprobe each.
func BenchmarkAttach1000(b *testing.B) {
	testenv.RequireBPF(b)
	bin := testworkload.BuildC(b, "fastprobe.c", "-O2")
	sites := sledSites(b, bin, 1000)
	for _, mode := range []struct {
		name      string
		perfEvent bool
	}{{"uprobe_multi", false}, {"perf_event", true}} {
		b.Run(mode.name, func(b *testing.B) {
			if !mode.perfEvent {
				testenv.Kernel(b, testenv.UprobeMulti, features.HaveBPFLinkUprobeMulti())
			}
			p, err := scopeprobe.New(scopeprobe.Options{Settings: []scopeprobe.Setting{{}}, PerfEventUprobes: mode.perfEvent})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			var attach, detach time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				a, err := p.Attach(bin, sites)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if a.Multi() == mode.perfEvent || a.Links() != len(sites) {
					b.Fatalf("multi %v with %d uprobes", a.Multi(), a.Links())
				}
				if err := a.Close(); err != nil {
					b.Fatal(err)
				}
				attach += t1.Sub(t0)
				detach += time.Since(t1)
			}
			b.ReportMetric(float64(attach.Milliseconds())/float64(b.N), "attach-ms")
			b.ReportMetric(float64(detach.Milliseconds())/float64(b.N), "detach-ms")
		})
	}
}

// TestAttachModes attaches the same sites both ways and checks that both
// hold every site, and that the multi mode is used exactly when the kernel
// has it.
func TestAttachModes(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "fastprobe.c", "-O2")
	sites := sledSites(t, bin, 16)
	haveMulti := testenv.Has(t, testenv.UprobeMulti, features.HaveBPFLinkUprobeMulti())
	for _, perfEvent := range []bool{false, true} {
		p, err := scopeprobe.New(scopeprobe.Options{Settings: []scopeprobe.Setting{{}}, PerfEventUprobes: perfEvent})
		if err != nil {
			t.Fatal(err)
		}
		a, err := p.Attach(bin, append(sites, scopeprobe.Site{Kind: scopeprobe.ReturnProbe, Offset: sites[0].Offset, Symbol: "nop_sled"}))
		if err != nil {
			p.Close()
			t.Fatal(err)
		}
		if want := haveMulti && !perfEvent; a.Multi() != want || a.Links() != len(sites)+1 {
			t.Errorf("perf-event mode %v: multi %v (want %v), %d uprobes", perfEvent, a.Multi(), want, a.Links())
		}
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		p.Close()
	}
}

// TestExpediteAttach attaches with ExpediteAttach from several goroutines
// at once: every attach succeeds, rcu_expedited was raised, and it is back
// to what it was once they are done and once the probes are closed.
func TestExpediteAttach(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "fastprobe.c", "-O2")
	sites := sledSites(t, bin, 4)
	before, err := os.ReadFile("/sys/kernel/rcu_expedited")
	if err != nil {
		t.Fatal(err)
	}
	p, err := scopeprobe.New(scopeprobe.Options{Settings: []scopeprobe.Setting{{}}, ExpediteAttach: true})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			p.Close()
		}
	}()
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			a, err := p.Attach(bin, sites)
			if err == nil {
				err = a.Close()
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	after, err := os.ReadFile("/sys/kernel/rcu_expedited")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("rcu_expedited %q after the attaches, was %q", after, before)
	}
	st := p.ExpediteStats()
	t.Logf("8 concurrent attaches: %+v", st)
	if st.Errors != 0 || st.Raised+st.AlreadySet == 0 {
		t.Errorf("stats %+v: want the knob raised (or found set) without errors", st)
	}
	if string(before) == "0\n" && st.Raised == 0 {
		t.Errorf("stats %+v: knob was clear but never raised", st)
	}
	closed = true
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile("/sys/kernel/rcu_expedited"); string(after) != string(before) {
		t.Errorf("rcu_expedited %q after Close, was %q", after, before)
	}
}
