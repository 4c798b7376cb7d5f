// Package profilebuilder turns symbolized stack samples into one pdata
// Profiles, with every dictionary table deduplicated through maps.
package profilebuilder

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/frame"
)

// Sample is one stack with how often it was seen.
type Sample struct {
	// Frames holds the leaf first.
	Frames     []frame.Frame
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
		res.PutInt(conventions.ProcessPID, p.PID)
		if p.ExePath != "" {
			res.PutStr(conventions.ProcessExecutablePath, p.ExePath)
		}
		if p.ExeName != "" {
			res.PutStr(conventions.ProcessExecutableName, p.ExeName)
		}
		if p.ContainerID != "" {
			res.PutStr(conventions.ContainerID, p.ContainerID)
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
				d.attrInt(conventions.ThreadID, s.ThreadID),
				d.attrStr(conventions.ThreadName, s.ThreadName),
			)
		}
	}
	return out
}
