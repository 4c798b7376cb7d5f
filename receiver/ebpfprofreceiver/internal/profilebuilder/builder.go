// Package profilebuilder turns symbolized stack samples into one pdata
// Profiles, with every dictionary table deduplicated through maps.
package profilebuilder

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Frame types, the values of the profile.frame.type location attribute.
const (
	FrameKernel = "kernel"
	// FrameBPF marks a JIT-compiled BPF program running in the kernel.
	FrameBPF    = "bpf"
	FrameNative = "native"
	FrameGo     = "go"
)

// Attribute keys, following the OpenTelemetry semantic conventions.
const (
	attrFrameType   = "profile.frame.type"
	attrBuildIDGNU  = "process.executable.build_id.gnu"
	attrBuildIDGo   = "process.executable.build_id.go"
	attrPID         = "process.pid"
	attrExePath     = "process.executable.path"
	attrExeName     = "process.executable.name"
	attrContainerID = "container.id"
	attrThreadID    = "thread.id"
	attrThreadName  = "thread.name"
)

// Line is one source-level function at a location.
type Line struct {
	Function string
	// SystemName is the name as the binary spells it (mangled); empty when
	// it is the same as Function.
	SystemName string
	File       string
	Line       int64
}

// Mapping is the file a location's address belongs to.
type Mapping struct {
	Path                  string
	Start, Limit, Offset  uint64
	BuildIDGNU, BuildIDGo string
}

// Frame is one location of a stack.
type Frame struct {
	// Address is the ELF virtual address for user frames (return addresses
	// already have 1 subtracted), the kernel address for kernel frames.
	Address uint64
	Type    string
	// Mapping may be nil when the address is not in a known file.
	Mapping *Mapping
	// Lines holds the inlined functions first and the function they were
	// inlined into last. Empty when the frame has no name.
	Lines []Line
}

// Sample is one stack with how often it was seen.
type Sample struct {
	// Frames holds the leaf first.
	Frames     []Frame
	Count      int64
	Timestamps []uint64
	ThreadID   int64
	ThreadName string
}

// Process is one process's samples.
type Process struct {
	PID         int64
	ExePath     string
	ExeName     string
	ContainerID string
	Samples     []Sample
}

// Meta describes the interval the samples cover.
type Meta struct {
	Start, End time.Time
	// PeriodNanos is the sampling period, 1e9/frequency.
	PeriodNanos int64
	// ScopeName and ScopeVersion name the instrumentation scope.
	ScopeName, ScopeVersion string
}

// Build returns one Profiles holding every process as its own
// ResourceProfiles, sharing one dictionary.
func Build(procs []Process, meta Meta) pprofile.Profiles {
	out := pprofile.NewProfiles()
	d := newDictionary(out.Dictionary())
	sampleType := [2]int32{d.str("samples"), d.str("count")}
	periodType := [2]int32{d.str("cpu"), d.str("nanoseconds")}

	for i := range procs {
		p := &procs[i]
		rp := out.ResourceProfiles().AppendEmpty()
		res := rp.Resource().Attributes()
		res.PutInt(attrPID, p.PID)
		if p.ExePath != "" {
			res.PutStr(attrExePath, p.ExePath)
		}
		if p.ExeName != "" {
			res.PutStr(attrExeName, p.ExeName)
		}
		if p.ContainerID != "" {
			res.PutStr(attrContainerID, p.ContainerID)
		}
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName(meta.ScopeName)
		sp.Scope().SetVersion(meta.ScopeVersion)
		prof := sp.Profiles().AppendEmpty()
		prof.SampleType().SetTypeStrindex(sampleType[0])
		prof.SampleType().SetUnitStrindex(sampleType[1])
		prof.PeriodType().SetTypeStrindex(periodType[0])
		prof.PeriodType().SetUnitStrindex(periodType[1])
		prof.SetPeriod(meta.PeriodNanos)
		prof.SetTime(pcommon.NewTimestampFromTime(meta.Start))
		prof.SetDurationNano(uint64(meta.End.Sub(meta.Start).Nanoseconds()))

		for j := range p.Samples {
			s := &p.Samples[j]
			ps := prof.Samples().AppendEmpty()
			ps.SetStackIndex(d.stack(s.Frames))
			ps.Values().Append(s.Count)
			ps.TimestampsUnixNano().Append(s.Timestamps...)
			ps.AttributeIndices().Append(
				d.attrInt(attrThreadID, s.ThreadID),
				d.attrStr(attrThreadName, s.ThreadName),
			)
		}
	}
	return out
}
