package profilebuilder

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/resolve"
)

// TestBuildScopeLinks checks that samples taken inside a probe scope link to
// its trace and span ids through the dictionary's link table (one entry per
// scope, shared by on-CPU and off-CPU samples), carry the probe's name as
// probe.id, and that samples outside any scope carry neither.
func TestBuildScopeLinks(t *testing.T) {
	const base = 7
	a := &resolve.Scope{TraceID: [16]byte{1, 2, 3}, SpanID: [8]byte{4, 5}, ProbeID: base + 1}
	b := &resolve.Scope{TraceID: [16]byte{9}, SpanID: [8]byte{8}, ProbeID: base}
	procs, meta := testInput()
	meta.ProbeName = probeNames(base, "parse", "work")
	procs[0].Samples[0].Scope = a
	procs[0].Samples[1].Scope = b
	kernel := frame.Frame{Address: 0xffffffff81000000, Type: frame.Kernel, Lines: []frame.Line{{Name: "schedule"}}}
	procs[0].OffCPUSamples = []resolve.Sample{{Frames: []frame.Frame{kernel}, Count: 1, ThreadID: 11, OffCPUNs: 5, Scope: a}}
	p := roundTrip(t, Build(procs, meta))
	d := p.Dictionary()
	probe := func(s pprofile.Sample) string {
		for _, i := range s.AttributeIndices().All() {
			at := d.AttributeTable().At(int(i))
			if d.StringTable().At(int(at.KeyStrindex())) == conventions.ProbeID {
				return at.Value().Str()
			}
		}
		return ""
	}
	if n := d.LinkTable().Len(); n != 3 {
		t.Fatalf("link table has %d entries, want 3 (the empty one and two scopes)", n)
	}
	profs := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles()
	on, off := profs.At(0).Samples(), profs.At(1).Samples()
	for _, c := range []struct {
		s     pprofile.Sample
		want  *resolve.Scope
		probe string
	}{{on.At(0), a, "work"}, {on.At(1), b, "parse"}, {on.At(2), nil, ""}, {off.At(0), a, "work"}} {
		li := c.s.LinkIndex()
		if c.want == nil {
			if li != 0 || probe(c.s) != "" {
				t.Errorf("sample outside a scope: link %d, probe.id %q", li, probe(c.s))
			}
			continue
		}
		l := d.LinkTable().At(int(li))
		if li == 0 || [16]byte(l.TraceID()) != c.want.TraceID || [8]byte(l.SpanID()) != c.want.SpanID {
			t.Errorf("link %d = %v/%v, want %x/%x", li, l.TraceID(), l.SpanID(), c.want.TraceID, c.want.SpanID)
		}
		if got := probe(c.s); got != c.probe {
			t.Errorf("probe.id = %q, want %q", got, c.probe)
		}
	}
	if on.At(0).LinkIndex() != off.At(0).LinkIndex() {
		t.Errorf("one scope has two links: %d and %d", on.At(0).LinkIndex(), off.At(0).LinkIndex())
	}
}

// probeNames names the probes base, base+1... as a uprobe receiver that
// registered names would.
func probeNames(base uint32, names ...string) func(uint32) (string, bool) {
	return func(id uint32) (string, bool) {
		if id < base || id-base >= uint32(len(names)) {
			return "", false
		}
		return names[id-base], true
	}
}

// TestBuildNamesUnknownProbesByNumber checks that a scope whose probe has
// no name (its receiver stopped since, or no names given) carries its
// number as probe.id.
func TestBuildNamesUnknownProbesByNumber(t *testing.T) {
	for _, names := range []func(uint32) (string, bool){nil, probeNames(7, "parse")} {
		procs, meta := testInput()
		meta.ProbeName = names
		procs[0].Samples[0].Scope = &resolve.Scope{TraceID: [16]byte{1}, SpanID: [8]byte{2}, ProbeID: 42}
		p := roundTrip(t, Build(procs, meta))
		d := p.Dictionary()
		s := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
		got := ""
		for _, i := range s.AttributeIndices().All() {
			at := d.AttributeTable().At(int(i))
			if d.StringTable().At(int(at.KeyStrindex())) == conventions.ProbeID {
				got = at.Value().Str()
			}
		}
		if got != "42" {
			t.Errorf("probe.id = %q, want \"42\"", got)
		}
	}
}
