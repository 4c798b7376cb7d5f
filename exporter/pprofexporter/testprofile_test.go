package pprofexporter

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// dictWriter appends entries to a ProfilesDictionary for hand-built test
// profiles.
type dictWriter struct {
	d       pprofile.ProfilesDictionary
	strings map[string]int32
}

func newDictWriter(p pprofile.Profiles) *dictWriter {
	d := p.Dictionary()
	d.StringTable().Append("")
	d.AttributeTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	return &dictWriter{d: d, strings: map[string]int32{"": 0}}
}

func (w *dictWriter) str(s string) int32 {
	if i, ok := w.strings[s]; ok {
		return i
	}
	i := int32(w.d.StringTable().Len())
	w.d.StringTable().Append(s)
	w.strings[s] = i
	return i
}

func (w *dictWriter) attr(key string, set func(pcommon.Value)) int32 {
	i := int32(w.d.AttributeTable().Len())
	a := w.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(w.str(key))
	set(a.Value())
	return i
}

func (w *dictWriter) attrStr(key, v string) int32 {
	return w.attr(key, func(x pcommon.Value) { x.SetStr(v) })
}

func (w *dictWriter) attrInt(key string, v int64) int32 {
	return w.attr(key, func(x pcommon.Value) { x.SetInt(v) })
}

// testMapping describes a mapping of a hand-built profile.
type testMapping struct {
	file                 string
	start, limit, offset uint64
	gnu, goID            string
}

func (w *dictWriter) mapping(m testMapping) int32 {
	i := int32(w.d.MappingTable().Len())
	pm := w.d.MappingTable().AppendEmpty()
	pm.SetFilenameStrindex(w.str(m.file))
	pm.SetMemoryStart(m.start)
	pm.SetMemoryLimit(m.limit)
	pm.SetFileOffset(m.offset)
	if m.gnu != "" {
		pm.AttributeIndices().Append(w.attrStr("process.executable.build_id.gnu", m.gnu))
	}
	if m.goID != "" {
		pm.AttributeIndices().Append(w.attrStr("process.executable.build_id.go", m.goID))
	}
	return i
}

// testLine is one function at a location: name, file and line.
type testLine struct {
	name, file string
	line       int64
}

// location adds a location whose lines are listed innermost inlined
// function first, as pdata orders them.
func (w *dictWriter) location(mapping int32, addr uint64, frameType string, lines ...testLine) int32 {
	i := int32(w.d.LocationTable().Len())
	loc := w.d.LocationTable().AppendEmpty()
	loc.SetMappingIndex(mapping)
	loc.SetAddress(addr)
	loc.AttributeIndices().Append(w.attrStr("profile.frame.type", frameType))
	for _, l := range lines {
		fi := int32(w.d.FunctionTable().Len())
		fn := w.d.FunctionTable().AppendEmpty()
		fn.SetNameStrindex(w.str(l.name))
		fn.SetSystemNameStrindex(w.str(l.name))
		fn.SetFilenameStrindex(w.str(l.file))
		pl := loc.Lines().AppendEmpty()
		pl.SetFunctionIndex(fi)
		pl.SetLine(l.line)
	}
	return i
}

// stack adds a stack of locations, leaf first.
func (w *dictWriter) stack(locs ...int32) int32 {
	i := int32(w.d.StackTable().Len())
	w.d.StackTable().AppendEmpty().LocationIndices().Append(locs...)
	return i
}

// newTestProfile adds one process's profile with the samples/count sample
// type and a cpu/nanoseconds period.
func (w *dictWriter) newTestProfile(p pprofile.Profiles, pid int64, exe string, period int64, start pcommon.Timestamp) pprofile.Profile {
	rp := p.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutInt("process.pid", pid)
	rp.Resource().Attributes().PutStr("process.executable.name", exe)
	rp.Resource().Attributes().PutStr("container.id", "c0ffee")
	prof := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(w.str("samples"))
	prof.SampleType().SetUnitStrindex(w.str("count"))
	prof.PeriodType().SetTypeStrindex(w.str("cpu"))
	prof.PeriodType().SetUnitStrindex(w.str("nanoseconds"))
	prof.SetPeriod(period)
	prof.SetTime(start)
	prof.SetDurationNano(5e9)
	return prof
}

func (w *dictWriter) sample(prof pprofile.Profile, stack int32, count, tid int64, thread string) {
	s := prof.Samples().AppendEmpty()
	s.SetStackIndex(stack)
	s.Values().Append(count)
	s.AttributeIndices().Append(w.attrInt("thread.id", tid), w.attrStr("thread.name", thread))
}
