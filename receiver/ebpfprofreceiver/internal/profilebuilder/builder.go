// Package profilebuilder turns symbolized stack samples into one pdata
// Profiles, with every dictionary table deduplicated through maps.
package profilebuilder

import (
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/resolve"
)

// Meta describes the interval the samples cover.
type Meta struct {
	Start, End time.Time
	// PeriodNanos is the sampling period, 1e9/frequency.
	PeriodNanos int64
	// ScopeName and ScopeVersion name the instrumentation scope.
	ScopeName, ScopeVersion string
	// ProbeName names the probe of a scope's ProbeID as its log records
	// do, false when it knows none; nil knows none. The uprobe receiver
	// that numbered the probe owns the names.
	ProbeName func(id uint32) (string, bool)
}

// Build returns one Profiles holding every process as its own
// ResourceProfiles, sharing one dictionary.
func Build(procs []resolve.Process, meta Meta) pprofile.Profiles {
	out := pprofile.NewProfiles()
	d := newDictionary(out.Dictionary())
	onCPU := profileType{
		sample: [2]int32{d.str(conventions.SampleTypeSamples), d.str(conventions.UnitCount)},
		period: [2]int32{d.str(conventions.PeriodTypeCPU), d.str(conventions.UnitNanoseconds)},
	}
	// Off-CPU time is measured, not sampled at a period.
	offCPU := profileType{sample: [2]int32{d.str(conventions.SampleTypeOffCPU), d.str(conventions.UnitNanoseconds)}}

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
		if len(p.Samples) > 0 || len(p.OffCPUSamples) == 0 {
			prof := newProfile(sp, onCPU, meta)
			prof.SetPeriod(meta.PeriodNanos)
			for j := range p.Samples {
				s := &p.Samples[j]
				ps := addSample(prof, d, s, meta.ProbeName)
				ps.Values().Append(s.Count)
			}
		}
		if len(p.OffCPUSamples) > 0 {
			prof := newProfile(sp, offCPU, meta)
			for j := range p.OffCPUSamples {
				s := &p.OffCPUSamples[j]
				ps := addSample(prof, d, s, meta.ProbeName)
				ps.Values().Append(s.OffCPUNs)
				reason := conventions.OffCPUReasonBlocked
				if s.Preempted {
					reason = conventions.OffCPUReasonPreempted
				}
				ps.AttributeIndices().Append(d.attrStr(conventions.OffCPUReason, reason))
			}
		}
	}
	return out
}

// profileType is a profile's sample and period types, as string indexes.
type profileType struct {
	sample, period [2]int32
}

func newProfile(sp pprofile.ScopeProfiles, typ profileType, meta Meta) pprofile.Profile {
	prof := sp.Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(typ.sample[0])
	prof.SampleType().SetUnitStrindex(typ.sample[1])
	prof.PeriodType().SetTypeStrindex(typ.period[0])
	prof.PeriodType().SetUnitStrindex(typ.period[1])
	prof.SetTime(pcommon.NewTimestampFromTime(meta.Start))
	prof.SetDurationNano(uint64(meta.End.Sub(meta.Start).Nanoseconds()))
	return prof
}

// addSample appends s's stack, timestamps, thread and scope to prof, the
// scope's probe named by names; the caller appends its value.
func addSample(prof pprofile.Profile, d *dictionary, s *resolve.Sample, names func(uint32) (string, bool)) pprofile.Sample {
	ps := prof.Samples().AppendEmpty()
	ps.SetStackIndex(d.stack(s.Frames))
	ps.TimestampsUnixNano().Append(s.Timestamps...)
	ps.AttributeIndices().Append(
		d.attrInt(conventions.ThreadID, s.ThreadID),
		d.attrStr(conventions.ThreadName, s.ThreadName),
	)
	if s.Scope != nil {
		ps.SetLinkIndex(d.link(s.Scope))
		ps.AttributeIndices().Append(d.attrStr(conventions.ProbeID, probeName(names, s.Scope.ProbeID)))
	}
	return ps
}

// probeName names a scope's probe as its log records do; a probe whose
// receiver has stopped since is named by its number.
func probeName(names func(uint32) (string, bool), id uint32) string {
	if names != nil {
		if name, ok := names(id); ok {
			return name
		}
	}
	return strconv.FormatUint(uint64(id), 10)
}
