package pprofconv

import (
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/conventions"
)

// oneSample returns a profile with one sample on stack 1, which holds one
// location with one function; corrupt, when set, breaks an index.
func oneSample(corrupt func(pprofile.Profiles)) pprofile.Profiles {
	p := pprofile.NewProfiles()
	d := p.Dictionary()
	d.StringTable().Append("", "samples", "count", "f")
	d.AttributeTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.FunctionTable().AppendEmpty().SetNameStrindex(3)
	d.LocationTable().AppendEmpty()
	d.LocationTable().AppendEmpty().Lines().AppendEmpty().SetFunctionIndex(1)
	d.StackTable().AppendEmpty()
	d.StackTable().AppendEmpty().LocationIndices().Append(1)
	prof := p.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(1)
	prof.SampleType().SetUnitStrindex(2)
	s := prof.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.TimestampsUnixNano().Append(1, 2, 3)
	if corrupt != nil {
		corrupt(p)
	}
	return p
}

func TestConvertCountsTimestamps(t *testing.T) {
	out, err := Convert(oneSample(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Sample) != 1 || out.Sample[0].Value[0] != 3 {
		t.Fatalf("samples = %+v, want one of value 3 (one per timestamp)", out.Sample)
	}
	if out.Sample[0].Location[0].Line[0].Function.Name != "f" || out.Sample[0].Location[0].Mapping != nil {
		t.Errorf("location = %+v", out.Sample[0].Location[0])
	}
}

func TestConvertRejectsBadIndices(t *testing.T) {
	sample := func(p pprofile.Profiles) pprofile.Sample {
		return p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
	}
	cases := map[string]func(pprofile.Profiles){
		"stack index":     func(p pprofile.Profiles) { sample(p).SetStackIndex(9) },
		"location index":  func(p pprofile.Profiles) { p.Dictionary().StackTable().At(1).LocationIndices().SetAt(0, -1) },
		"function index":  func(p pprofile.Profiles) { p.Dictionary().LocationTable().At(1).Lines().At(0).SetFunctionIndex(7) },
		"mapping index":   func(p pprofile.Profiles) { p.Dictionary().LocationTable().At(1).SetMappingIndex(4) },
		"string index":    func(p pprofile.Profiles) { p.Dictionary().FunctionTable().At(1).SetNameStrindex(99) },
		"attribute index": func(p pprofile.Profiles) { sample(p).AttributeIndices().Append(5) },
	}
	for what, corrupt := range cases {
		_, err := Convert(oneSample(corrupt))
		if err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("%s out of range: Convert() = %v, want an error naming it", what, err)
		}
	}
}

// TestConvertLinkLabels checks that a linked sample gets its scope's ids as
// span_id and trace_id labels, in the hex a log record shows them in, and
// that a link index outside the table is an error.
func TestConvertLinkLabels(t *testing.T) {
	p := oneSample(func(p pprofile.Profiles) {
		d := p.Dictionary()
		d.LinkTable().AppendEmpty()
		l := d.LinkTable().AppendEmpty()
		l.SetTraceID(pcommon.TraceID{0xab, 1})
		l.SetSpanID(pcommon.SpanID{0xcd, 2, 0, 0, 0, 0, 0, 3})
		p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).SetLinkIndex(1)
	})
	out, err := Convert(p)
	if err != nil {
		t.Fatal(err)
	}
	lbl := out.Sample[0].Label
	if got := lbl[conventions.LabelSpanID]; len(got) != 1 || got[0] != "cd02000000000003" {
		t.Errorf("span_id label = %v", got)
	}
	if got := lbl[conventions.LabelTraceID]; len(got) != 1 || got[0] != "ab010000000000000000000000000000" {
		t.Errorf("trace_id label = %v", got)
	}
	p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).SetLinkIndex(7)
	if _, err := Convert(p); err == nil || !strings.Contains(err.Error(), "link index") {
		t.Errorf("link index outside the table: err = %v", err)
	}
}
