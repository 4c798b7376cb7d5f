package profilebuilder

import (
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/resolve"
)

// dictionary deduplicates every table of a ProfilesDictionary with maps:
// pprofile's Set* helpers search their tables linearly.
type dictionary struct {
	d         pprofile.ProfilesDictionary
	strings   map[string]int32
	attrs     map[attrKey]int32
	functions map[functionKey]int32
	mappings  map[frame.Mapping]int32
	locations map[string]int32
	// byPointer and locationsByPointer find again, without building a
	// key, what the resolver handed out once and shared: its mappings
	// and the named frames of a batch. They hold only what the maps by
	// value hold.
	byPointer          map[*frame.Mapping]int32
	locationsByPointer map[locationPointers]int32
	stacks             map[string]int32
	links              map[resolve.Scope]int32
	scratch            strings.Builder
}

type attrKey struct {
	key   string
	str   string
	num   int64
	isNum bool
}

// locationPointers is a frame by its shared parts. The frames of one Build
// stay alive until it returns, so equal pointers mean equal contents.
type locationPointers struct {
	mapping *frame.Mapping
	address uint64
	typ     frame.Type
	lines   *frame.Line
	n       int
}

type functionKey struct {
	name, systemName, file string
}

func newDictionary(d pprofile.ProfilesDictionary) *dictionary {
	// Index 0 of every table is the empty entry.
	d.StringTable().Append("")
	d.AttributeTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	return &dictionary{
		d:         d,
		strings:   map[string]int32{"": 0},
		attrs:     map[attrKey]int32{},
		functions: map[functionKey]int32{},
		mappings:  map[frame.Mapping]int32{},
		locations: map[string]int32{},

		byPointer:          map[*frame.Mapping]int32{},
		locationsByPointer: map[locationPointers]int32{},
		stacks:             map[string]int32{},
		links:              map[resolve.Scope]int32{},
	}
}

// link returns the index of the link to scope l: its trace and span ids.
func (t *dictionary) link(l *resolve.Scope) int32 {
	key := resolve.Scope{TraceID: l.TraceID, SpanID: l.SpanID}
	if idx, ok := t.links[key]; ok {
		return idx
	}
	idx := int32(t.d.LinkTable().Len())
	pl := t.d.LinkTable().AppendEmpty()
	pl.SetTraceID(pcommon.TraceID(l.TraceID))
	pl.SetSpanID(pcommon.SpanID(l.SpanID))
	t.links[key] = idx
	return idx
}

func (t *dictionary) str(s string) int32 {
	if idx, ok := t.strings[s]; ok {
		return idx
	}
	idx := int32(t.d.StringTable().Len())
	t.d.StringTable().Append(s)
	t.strings[s] = idx
	return idx
}

func (t *dictionary) attrStr(key, value string) int32 {
	k := attrKey{key: key, str: value}
	if idx, ok := t.attrs[k]; ok {
		return idx
	}
	idx := int32(t.d.AttributeTable().Len())
	a := t.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(t.str(key))
	a.Value().SetStr(value)
	t.attrs[k] = idx
	return idx
}

func (t *dictionary) attrInt(key string, value int64) int32 {
	k := attrKey{key: key, num: value, isNum: true}
	if idx, ok := t.attrs[k]; ok {
		return idx
	}
	idx := int32(t.d.AttributeTable().Len())
	a := t.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(t.str(key))
	a.Value().SetInt(value)
	t.attrs[k] = idx
	return idx
}

func (t *dictionary) function(l *frame.Line) int32 {
	k := functionKey{l.Name, l.SystemName, l.File}
	if idx, ok := t.functions[k]; ok {
		return idx
	}
	idx := int32(t.d.FunctionTable().Len())
	f := t.d.FunctionTable().AppendEmpty()
	f.SetNameStrindex(t.str(l.Name))
	sys := l.SystemName
	if sys == "" {
		sys = l.Name
	}
	f.SetSystemNameStrindex(t.str(sys))
	f.SetFilenameStrindex(t.str(l.File))
	t.functions[k] = idx
	return idx
}

func (t *dictionary) mapping(m *frame.Mapping) int32 {
	if m == nil {
		return 0
	}
	if idx, ok := t.byPointer[m]; ok {
		return idx
	}
	if idx, ok := t.mappings[*m]; ok {
		t.byPointer[m] = idx
		return idx
	}
	idx := int32(t.d.MappingTable().Len())
	pm := t.d.MappingTable().AppendEmpty()
	pm.SetMemoryStart(m.Start)
	pm.SetMemoryLimit(m.End)
	pm.SetFileOffset(m.Offset)
	pm.SetFilenameStrindex(t.str(m.Path))
	if m.BuildIDGNU != "" {
		pm.AttributeIndices().Append(t.attrStr(conventions.ProcessExecutableBuildIDGNU, m.BuildIDGNU))
	}
	if m.BuildIDGo != "" {
		pm.AttributeIndices().Append(t.attrStr(conventions.ProcessExecutableBuildIDGo, m.BuildIDGo))
	}
	t.mappings[*m] = idx
	t.byPointer[m] = idx
	return idx
}

// location keys a frame by its mapping, address, type and names, so two
// processes sharing a library share its locations.
func (t *dictionary) location(f *frame.Frame) int32 {
	ptrs := locationPointers{mapping: f.Mapping, address: f.LocationAddress(), typ: f.Type, n: len(f.Lines)}
	if len(f.Lines) > 0 {
		ptrs.lines = &f.Lines[0]
	}
	if idx, ok := t.locationsByPointer[ptrs]; ok {
		return idx
	}
	idx := t.locationByValue(f)
	t.locationsByPointer[ptrs] = idx
	return idx
}

func (t *dictionary) locationByValue(f *frame.Frame) int32 {
	mi := t.mapping(f.Mapping)
	b := &t.scratch
	b.Reset()
	b.WriteString(strconv.FormatInt(int64(mi), 36))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(f.LocationAddress(), 36))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(uint64(f.Type), 36))
	for i := range f.Lines {
		b.WriteByte(0)
		b.WriteString(strconv.FormatInt(int64(t.function(&f.Lines[i])), 36))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(f.Lines[i].Line, 36))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(f.Lines[i].Column, 36))
	}
	key := b.String()
	if idx, ok := t.locations[key]; ok {
		return idx
	}
	idx := int32(t.d.LocationTable().Len())
	loc := t.d.LocationTable().AppendEmpty()
	loc.SetMappingIndex(mi)
	loc.SetAddress(f.LocationAddress())
	loc.AttributeIndices().Append(t.attrStr(conventions.ProfileFrameType, f.Type.String()))
	for i := range f.Lines {
		l := loc.Lines().AppendEmpty()
		l.SetFunctionIndex(t.function(&f.Lines[i]))
		l.SetLine(f.Lines[i].Line)
		l.SetColumn(f.Lines[i].Column)
	}
	t.locations[key] = idx
	return idx
}

func (t *dictionary) stack(frames []frame.Frame) int32 {
	idxs := make([]int32, len(frames))
	b := make([]byte, 0, 4*len(frames))
	for i := range frames {
		idxs[i] = t.location(&frames[i])
		v := idxs[i]
		b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	key := string(b)
	if idx, ok := t.stacks[key]; ok {
		return idx
	}
	idx := int32(t.d.StackTable().Len())
	t.d.StackTable().AppendEmpty().LocationIndices().Append(idxs...)
	t.stacks[key] = idx
	return idx
}
