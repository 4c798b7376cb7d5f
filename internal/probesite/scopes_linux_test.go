package probesite

import (
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestManyScopesOpenOnOneThread puts more probes on one harness function
// than a thread has scope slots, so every call opens them all at once and
// some go to the shared scopes map. Each probe must still give one
// record per outermost call with the same nesting, and no exit may miss its
// entry.
func TestManyScopesOpenOnOneThread(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "fastprobe.c", harnessFlags...)
	b := open(t, bin)
	const probes, calls = 12, 500
	p, err := scopeprobe.New(scopeprobe.Options{Settings: make([]scopeprobe.Setting, probes)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var sites []scopeprobe.Site
	for id := range probes {
		plan, err := b.PlanProbe(uint32(id), "f_rec", ExitReturn)
		if err != nil {
			t.Fatal(err)
		}
		sites = append(sites, plan.Sites...)
	}
	a, err := p.Attach(bin, sites)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	runHarness(t, bin, "f_rec", calls)

	// nested[id] counts records by nesting, per probe.
	nested := make([]map[uint32]int, probes)
	for id := range nested {
		nested[id] = map[uint32]int{}
	}
	want := probes * (calls + 1)
	p.SetDeadline(time.Now().Add(2 * time.Second))
	var rec scopeprobe.Record
	for records := 0; records < want; records++ {
		if err := p.Read(&rec); err != nil {
			t.Fatalf("%d records of %d: %v", records, want, err)
		}
		if int(rec.ProbeID) >= probes || rec.EndNs < rec.StartNs {
			t.Fatalf("record %+v", rec)
		}
		nested[rec.ProbeID][rec.Nested]++
	}
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Records != uint64(want) || c.ExitWithoutEntry != 0 || c.ScopeFull != 0 || c.LostRingbuf != 0 {
		t.Errorf("counters %+v, want %d records and nothing else", c, want)
	}
	for id := 1; id < probes; id++ {
		if len(nested[id]) != len(nested[0]) {
			t.Errorf("probe %d nesting %v, probe 0 %v", id, nested[id], nested[0])
			continue
		}
		for n, count := range nested[0] {
			if nested[id][n] != count {
				t.Errorf("probe %d nesting %v, probe 0 %v", id, nested[id], nested[0])
				break
			}
		}
	}
}
