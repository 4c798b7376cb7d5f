package profilebuilder

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/resolve"
)

func roundTrip(t *testing.T, p pprofile.Profiles) pprofile.Profiles {
	t.Helper()
	data, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(data)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

func testInput() ([]resolve.Process, Meta) {
	userMapping := func(path string, start, end, offset uint64) process.Mapping {
		return process.Mapping{Path: path, Start: start, End: end, Offset: offset}
	}
	bin := &frame.Mapping{Mapping: userMapping("/usr/bin/app", 0x1000, 0x9000, 0x1000), BuildIDGNU: "abcd"}
	goBin := &frame.Mapping{Mapping: userMapping("/usr/bin/goapp", 0x400000, 0x800000, 0), BuildIDGo: "go-id/x"}
	leaf := frame.Frame{Address: 0x1234, Type: frame.Native, Mapping: bin, Lines: []frame.Line{
		{Name: "inlined_helper", File: "a.c", Line: 10, Column: 5},
		{Name: "ns::leaf(int)", SystemName: "_ZN2ns4leafEi", File: "a.c", Line: 20},
	}}
	caller := frame.Frame{Address: 0x1300, Type: frame.Native, Mapping: &frame.Mapping{Mapping: userMapping("/usr/bin/app", 0x1000, 0x9000, 0x1000), BuildIDGNU: "abcd"},
		Lines: []frame.Line{{Name: "main", SystemName: "main", File: "a.c", Line: 30}}}
	kernel := frame.Frame{Address: 0xffffffff81000000, Type: frame.Kernel, Lines: []frame.Line{{Name: "vfs_read"}}}
	unnamed := frame.Frame{Address: 0x5000, Type: frame.Native, Mapping: bin}
	goFrame := frame.Frame{Address: 0x401000, Type: frame.Go, Mapping: goBin, Lines: []frame.Line{{Name: "main.leaf", File: "main.go", Line: 7}}}
	procs := []resolve.Process{
		{PID: 10, Info: process.Info{ExePath: "/usr/bin/app", ExeName: "app", ContainerID: "c0ffee"}, Samples: []resolve.Sample{
			{Frames: []frame.Frame{kernel, leaf, caller}, Count: 3, Timestamps: []uint64{1, 2, 3}, ThreadID: 11, ThreadName: "worker"},
			{Frames: []frame.Frame{leaf, caller}, Count: 1, Timestamps: []uint64{4}, ThreadID: 10, ThreadName: "app"},
			{Frames: []frame.Frame{unnamed, caller}, Count: 2, ThreadID: 10, ThreadName: "app"},
		}},
		{PID: 20, Info: process.Info{ExePath: "/usr/bin/goapp", ExeName: "goapp"}, Samples: []resolve.Sample{
			{Frames: []frame.Frame{goFrame}, Count: 5, ThreadID: 21, ThreadName: "goapp"},
			{Frames: []frame.Frame{leaf, caller}, Count: 1, ThreadID: 22, ThreadName: "goapp"},
		}},
	}
	meta := Meta{Start: time.Unix(100, 0), End: time.Unix(105, 0), PeriodNanos: 50_000_000, ScopeName: "test"}
	return procs, meta
}

func TestBuildRoundTrip(t *testing.T) {
	procs, meta := testInput()
	p := roundTrip(t, Build(procs, meta))
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }

	// Index 0 of every table is the empty entry.
	if d.StringTable().At(0) != "" {
		t.Error("string 0 is not empty")
	}
	if d.LocationTable().At(0).Address() != 0 || d.LocationTable().At(0).Lines().Len() != 0 {
		t.Error("location 0 is not empty")
	}
	if d.FunctionTable().At(0).NameStrindex() != 0 || d.MappingTable().At(0).FilenameStrindex() != 0 {
		t.Error("function 0 or mapping 0 is not empty")
	}
	if d.StackTable().At(0).LocationIndices().Len() != 0 || d.AttributeTable().At(0).KeyStrindex() != 0 {
		t.Error("stack 0 or attribute 0 is not empty")
	}
	// Equal mappings (even as distinct pointers) and strings are stored once.
	if n := d.MappingTable().Len(); n != 3 {
		t.Errorf("%d mappings, want 3 (empty, app, goapp)", n)
	}
	seen := map[string]bool{}
	for i := 0; i < d.StringTable().Len(); i++ {
		s := d.StringTable().At(i)
		if seen[s] {
			t.Errorf("string %q stored twice", s)
		}
		seen[s] = true
	}

	if p.ResourceProfiles().Len() != 2 {
		t.Fatalf("%d resource profiles, want 2", p.ResourceProfiles().Len())
	}
	rp := p.ResourceProfiles().At(0)
	attrs := rp.Resource().Attributes()
	if v, _ := attrs.Get("process.pid"); v.Int() != 10 {
		t.Errorf("process.pid %v", v.AsRaw())
	}
	if v, _ := attrs.Get("container.id"); v.Str() != "c0ffee" {
		t.Errorf("container.id %v", v.AsRaw())
	}
	if _, ok := p.ResourceProfiles().At(1).Resource().Attributes().Get("container.id"); ok {
		t.Error("container.id set on a process without one")
	}
	prof := rp.ScopeProfiles().At(0).Profiles().At(0)
	if str(prof.SampleType().TypeStrindex()) != "samples" || str(prof.SampleType().UnitStrindex()) != "count" {
		t.Error("bad sample type")
	}
	if str(prof.PeriodType().TypeStrindex()) != "cpu" || str(prof.PeriodType().UnitStrindex()) != "nanoseconds" || prof.Period() != 50_000_000 {
		t.Error("bad period")
	}
	if prof.DurationNano() != 5e9 {
		t.Errorf("duration %d", prof.DurationNano())
	}

	// First sample: kernel frame, then leaf with its inline chain, then main.
	s0 := prof.Samples().At(0)
	if s0.Values().At(0) != 3 || s0.TimestampsUnixNano().Len() != 3 {
		t.Errorf("sample 0 value/timestamps: %v %v", s0.Values().AsRaw(), s0.TimestampsUnixNano().AsRaw())
	}
	sattrs := map[string]any{}
	for _, ai := range s0.AttributeIndices().AsRaw() {
		a := d.AttributeTable().At(int(ai))
		sattrs[str(a.KeyStrindex())] = a.Value().AsRaw()
	}
	if sattrs["thread.id"] != int64(11) || sattrs["thread.name"] != "worker" {
		t.Errorf("sample attributes %v", sattrs)
	}
	stack := d.StackTable().At(int(s0.StackIndex())).LocationIndices()
	if stack.Len() != 3 {
		t.Fatalf("stack of %d locations", stack.Len())
	}
	frameType := func(loc pprofile.Location) string {
		for _, ai := range loc.AttributeIndices().AsRaw() {
			a := d.AttributeTable().At(int(ai))
			if str(a.KeyStrindex()) == "profile.frame.type" {
				return a.Value().Str()
			}
		}
		return ""
	}
	k := d.LocationTable().At(int(stack.At(0)))
	if frameType(k) != "kernel" || k.MappingIndex() != 0 {
		t.Errorf("kernel frame: type %q mapping %d", frameType(k), k.MappingIndex())
	}
	leaf := d.LocationTable().At(int(stack.At(1)))
	var names, systemNames []string
	for i := 0; i < leaf.Lines().Len(); i++ {
		fn := d.FunctionTable().At(int(leaf.Lines().At(i).FunctionIndex()))
		names = append(names, str(fn.NameStrindex()))
		systemNames = append(systemNames, str(fn.SystemNameStrindex()))
	}
	if len(names) != 2 || names[0] != "inlined_helper" || names[1] != "ns::leaf(int)" {
		t.Errorf("leaf lines %v, want [inlined_helper ns::leaf(int)]", names)
	}
	// The demangled name is the function's name, the mangled one its
	// system name; a name without a mangled form is both.
	if len(systemNames) != 2 || systemNames[0] != "inlined_helper" || systemNames[1] != "_ZN2ns4leafEi" {
		t.Errorf("leaf system names %v, want [inlined_helper _ZN2ns4leafEi]", systemNames)
	}
	if c := leaf.Lines().At(0).Column(); c != 5 {
		t.Errorf("inlined line column %d, want 5", c)
	}
	if leaf.Address() != 0x1234 || frameType(leaf) != "native" {
		t.Errorf("leaf address %x type %q", leaf.Address(), frameType(leaf))
	}
	m := d.MappingTable().At(int(leaf.MappingIndex()))
	if str(m.FilenameStrindex()) != "/usr/bin/app" || m.MemoryStart() != 0x1000 || m.MemoryLimit() != 0x9000 || m.FileOffset() != 0x1000 {
		t.Errorf("mapping %v", m)
	}
	var buildID string
	for _, ai := range m.AttributeIndices().AsRaw() {
		a := d.AttributeTable().At(int(ai))
		if str(a.KeyStrindex()) == "process.executable.build_id.gnu" {
			buildID = a.Value().Str()
		}
	}
	if buildID != "abcd" {
		t.Errorf("build id %q", buildID)
	}

	// The same [leaf, caller] stack in two processes is one stack entry.
	s1 := prof.Samples().At(1)
	other := p.ResourceProfiles().At(1).ScopeProfiles().At(0).Profiles().At(0).Samples().At(1)
	if s1.StackIndex() != other.StackIndex() {
		t.Errorf("equal stacks got indexes %d and %d", s1.StackIndex(), other.StackIndex())
	}
	// A frame without a name keeps its address and mapping.
	s2 := prof.Samples().At(2)
	un := d.LocationTable().At(int(d.StackTable().At(int(s2.StackIndex())).LocationIndices().At(0)))
	if un.Address() != 0x5000 || un.Lines().Len() != 0 || un.MappingIndex() != leaf.MappingIndex() {
		t.Errorf("unnamed frame: %x lines %d mapping %d", un.Address(), un.Lines().Len(), un.MappingIndex())
	}
	if p.SampleCount() != 5 {
		t.Errorf("sample count %d", p.SampleCount())
	}
}

func BenchmarkBuild(b *testing.B) {
	procs, meta := testInput()
	for b.Loop() {
		Build(procs, meta)
	}
}
