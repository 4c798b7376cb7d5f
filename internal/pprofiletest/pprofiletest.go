// Package pprofiletest reads pdata profiles back in tests: every sample as
// its process id, frame names and frame types.
package pprofiletest

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/conventions"
)

// Sample is one sample of a profile, with its frames' function names, leaf
// first (inlined functions before the function they sit in).
type Sample struct {
	PID   int64
	Names []string
	Types []string
	// Addrs and Files are the address and mapping file name of the
	// location each name comes from; a location without lines (a frame
	// the profiler left for the backend to name, as the OTel eBPF
	// profiler does with native code) has one entry with an empty name.
	Addrs []uint64
	Files []string
	// SourceFiles and Lines are each name's source file and line, "" and 0
	// when unknown; Locations the index in the stack of its location
	// (names of inlined functions share their location).
	SourceFiles []string
	Lines       []int64
	Locations   []int
	// Count is the sample's first value or, when it has none (the OTel
	// eBPF profiler sends only timestamps), its number of timestamps.
	Count     int64
	ThreadIDs []int64
	// SampleType is the profile's sample type and unit: "samples/count",
	// "off_cpu/nanoseconds".
	SampleType string
	// Labels are the sample's string attributes.
	Labels map[string]string
	// TraceID and SpanID are the ids of the sample's link, in hex; empty
	// for a sample without one.
	TraceID, SpanID string
	// Timestamps are the sample's times, unix nanoseconds.
	Timestamps []uint64
	// StackLocations are the sample's locations, leaf first.
	StackLocations []StackLocation
}

// StackLocation is one location of a sample: several names where calls
// were inlined.
type StackLocation struct {
	// Names are its functions, the inlined ones first and last the one
	// its address is in.
	Names []string
	// Type is its profile.frame.type; File is its mapping's file name.
	Type, File string
	// Address is its address: an ELF virtual address in File where the
	// frame was named from it, a caller's one byte before its return
	// address.
	Address uint64
}

// Function is the function f's address is in, the inlined calls folded
// into it ("" when unnamed), as tools that do not expand inlines name it.
func (f StackLocation) Function() string {
	if len(f.Names) == 0 {
		return ""
	}
	return f.Names[len(f.Names)-1]
}

// Samples flattens every sample of every process in p.
func Samples(p pprofile.Profiles) []Sample {
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	var out []Sample
	for i := 0; i < p.ResourceProfiles().Len(); i++ {
		rp := p.ResourceProfiles().At(i)
		pidVal, _ := rp.Resource().Attributes().Get(conventions.ProcessPID)
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			sp := rp.ScopeProfiles().At(j)
			for k := 0; k < sp.Profiles().Len(); k++ {
				prof := sp.Profiles().At(k)
				sampleType := str(prof.SampleType().TypeStrindex()) + "/" + str(prof.SampleType().UnitStrindex())
				samples := prof.Samples()
				for s := 0; s < samples.Len(); s++ {
					smp := samples.At(s)
					ss := Sample{PID: pidVal.Int(), SampleType: sampleType, Labels: map[string]string{}}
					ss.Timestamps = smp.TimestampsUnixNano().AsRaw()
					ss.Count = int64(len(ss.Timestamps))
					if smp.Values().Len() > 0 {
						ss.Count = smp.Values().At(0)
					}
					if li := smp.LinkIndex(); li > 0 && int(li) < d.LinkTable().Len() {
						l := d.LinkTable().At(int(li))
						ss.TraceID, ss.SpanID = l.TraceID().String(), l.SpanID().String()
					}
					for _, ai := range smp.AttributeIndices().AsRaw() {
						a := d.AttributeTable().At(int(ai))
						switch key := str(a.KeyStrindex()); {
						case key == conventions.ThreadID:
							ss.ThreadIDs = append(ss.ThreadIDs, a.Value().Int())
						case a.Value().Type() == pcommon.ValueTypeStr:
							ss.Labels[key] = a.Value().Str()
						}
					}
					locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
					for l := 0; l < locs.Len(); l++ {
						loc := d.LocationTable().At(int(locs.At(l)))
						ftype := ""
						for _, ai := range loc.AttributeIndices().AsRaw() {
							a := d.AttributeTable().At(int(ai))
							if str(a.KeyStrindex()) == conventions.ProfileFrameType {
								ftype = a.Value().Str()
							}
						}
						file := ""
						if mi := loc.MappingIndex(); mi > 0 && int(mi) < d.MappingTable().Len() {
							file = str(d.MappingTable().At(int(mi)).FilenameStrindex())
						}
						frame := StackLocation{Type: ftype, File: file, Address: loc.Address()}
						add := func(name, src string, line int64) {
							ss.Names = append(ss.Names, name)
							frame.Names = append(frame.Names, name)
							ss.Types = append(ss.Types, ftype)
							ss.Addrs = append(ss.Addrs, loc.Address())
							ss.Files = append(ss.Files, file)
							ss.SourceFiles = append(ss.SourceFiles, src)
							ss.Lines = append(ss.Lines, line)
							ss.Locations = append(ss.Locations, l)
						}
						if loc.Lines().Len() == 0 {
							add("", "", 0)
						}
						for n := 0; n < loc.Lines().Len(); n++ {
							ln := loc.Lines().At(n)
							fn := d.FunctionTable().At(int(ln.FunctionIndex()))
							add(str(fn.NameStrindex()), str(fn.FilenameStrindex()), ln.Line())
						}
						ss.StackLocations = append(ss.StackLocations, frame)
					}
					out = append(out, ss)
				}
			}
		}
	}
	return out
}

// UserNames returns the names of the sample's user frames.
func (s Sample) UserNames() []string {
	var names []string
	for i, n := range s.Names {
		if !isKernel(s.Types[i]) {
			names = append(names, n)
		}
	}
	return names
}

// UserLocations returns the sample's user locations, leaf first.
func (s Sample) UserLocations() []StackLocation {
	var out []StackLocation
	for _, f := range s.StackLocations {
		if !isKernel(f.Type) {
			out = append(out, f)
		}
	}
	return out
}

// KernelNames returns the names of the sample's kernel frames.
func (s Sample) KernelNames() []string {
	var names []string
	for i, n := range s.Names {
		if isKernel(s.Types[i]) {
			names = append(names, n)
		}
	}
	return names
}

// HasChain reports whether the sample's user frames start with chain.
func (s Sample) HasChain(chain []string) bool {
	names := s.UserNames()
	return len(names) >= len(chain) && slices.Equal(names[:len(chain)], chain)
}

// Frame is one name of a sample's stack, with its type and place.
type Frame struct {
	Name, Type, File string
	Line             int64
	// Location is the index in the stack of the frame's location.
	Location int
}

// Frames returns the sample's names with their types, files and lines,
// leaf first.
func (s Sample) Frames() []Frame {
	out := make([]Frame, len(s.Names))
	for i := range s.Names {
		out[i] = Frame{Name: s.Names[i], Type: s.Types[i], File: s.SourceFiles[i], Line: s.Lines[i], Location: s.Locations[i]}
	}
	return out
}

// isKernel reports whether a frame type runs in the kernel: kernel code or
// a JIT-compiled BPF program.
func isKernel(frameType string) bool {
	return frameType == conventions.FrameTypeKernel || frameType == conventions.FrameTypeBPF
}
