package pprofconv

import (
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
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
