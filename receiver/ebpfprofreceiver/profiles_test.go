package ebpfprofreceiver

import (
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// stackSample is one sample of a profile, with its frames' function names,
// leaf first (inlined functions before the function they sit in).
type stackSample struct {
	pid       int64
	names     []string
	types     []string
	count     int64
	threadIDs []int64
}

// samplesOf flattens every sample of every process in p.
func samplesOf(p pprofile.Profiles) []stackSample {
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	var out []stackSample
	for i := 0; i < p.ResourceProfiles().Len(); i++ {
		rp := p.ResourceProfiles().At(i)
		pidVal, _ := rp.Resource().Attributes().Get("process.pid")
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			sp := rp.ScopeProfiles().At(j)
			for k := 0; k < sp.Profiles().Len(); k++ {
				samples := sp.Profiles().At(k).Samples()
				for s := 0; s < samples.Len(); s++ {
					smp := samples.At(s)
					ss := stackSample{pid: pidVal.Int(), count: smp.Values().At(0)}
					for _, ai := range smp.AttributeIndices().AsRaw() {
						a := d.AttributeTable().At(int(ai))
						if str(a.KeyStrindex()) == "thread.id" {
							ss.threadIDs = append(ss.threadIDs, a.Value().Int())
						}
					}
					locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
					for l := 0; l < locs.Len(); l++ {
						loc := d.LocationTable().At(int(locs.At(l)))
						ftype := ""
						for _, ai := range loc.AttributeIndices().AsRaw() {
							a := d.AttributeTable().At(int(ai))
							if str(a.KeyStrindex()) == "profile.frame.type" {
								ftype = a.Value().Str()
							}
						}
						if loc.Lines().Len() == 0 {
							ss.names = append(ss.names, "")
							ss.types = append(ss.types, ftype)
						}
						for n := 0; n < loc.Lines().Len(); n++ {
							fn := d.FunctionTable().At(int(loc.Lines().At(n).FunctionIndex()))
							ss.names = append(ss.names, str(fn.NameStrindex()))
							ss.types = append(ss.types, ftype)
						}
					}
					out = append(out, ss)
				}
			}
		}
	}
	return out
}

// userNames drops the kernel frames of a sample.
func (s stackSample) userNames() []string {
	var names []string
	for i, n := range s.names {
		if s.types[i] != "kernel" {
			names = append(names, n)
		}
	}
	return names
}
