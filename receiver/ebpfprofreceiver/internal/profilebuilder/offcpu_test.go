package profilebuilder

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/resolve"
)

// TestBuildOffCPU checks that off-CPU samples go into a second profile of
// the same ResourceProfiles, typed off_cpu/nanoseconds without a period,
// valued by their time and saying how the thread left the CPU; and that a
// process with only off-CPU samples gets no empty on-CPU profile.
func TestBuildOffCPU(t *testing.T) {
	procs, meta := testInput()
	kernel := frame.Frame{Address: 0xffffffff81000000, Type: frame.Kernel, Lines: []frame.Line{{Name: "schedule"}}}
	procs[0].OffCPUSamples = []resolve.Sample{
		{Frames: []frame.Frame{kernel}, Count: 2, Timestamps: []uint64{7, 8}, ThreadID: 11, ThreadName: "worker", OffCPUNs: 40_000_000},
		{Frames: []frame.Frame{kernel}, Count: 1, Timestamps: []uint64{9}, ThreadID: 11, ThreadName: "worker", OffCPUNs: 3_000_000, Preempted: true},
	}
	procs = append(procs, resolve.Process{PID: 30, OffCPUSamples: []resolve.Sample{{Frames: []frame.Frame{kernel}, Count: 1, ThreadID: 30, OffCPUNs: 5}}})
	p := roundTrip(t, Build(procs, meta))
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	typeOf := func(prof pprofile.Profile) string {
		return str(prof.SampleType().TypeStrindex()) + "/" + str(prof.SampleType().UnitStrindex())
	}
	reason := func(s pprofile.Sample) string {
		for _, i := range s.AttributeIndices().All() {
			a := d.AttributeTable().At(int(i))
			if str(a.KeyStrindex()) == conventions.OffCPUReason {
				return a.Value().Str()
			}
		}
		return ""
	}

	rps := p.ResourceProfiles()
	profs := rps.At(0).ScopeProfiles().At(0).Profiles()
	if profs.Len() != 2 || typeOf(profs.At(0)) != "samples/count" || typeOf(profs.At(1)) != "off_cpu/nanoseconds" {
		t.Fatalf("process 10: %d profiles, want samples/count then off_cpu/nanoseconds", profs.Len())
	}
	off := profs.At(1)
	if off.Period() != 0 || off.PeriodType().TypeStrindex() != 0 {
		t.Errorf("off-CPU profile has a period")
	}
	if off.Samples().Len() != 2 {
		t.Fatalf("%d off-CPU samples, want 2", off.Samples().Len())
	}
	s0, s1 := off.Samples().At(0), off.Samples().At(1)
	if s0.Values().At(0) != 40_000_000 || s0.TimestampsUnixNano().Len() != 2 || reason(s0) != "blocked" {
		t.Errorf("blocked sample: value %d, %d timestamps, reason %q", s0.Values().At(0), s0.TimestampsUnixNano().Len(), reason(s0))
	}
	if s1.Values().At(0) != 3_000_000 || reason(s1) != "preempted" {
		t.Errorf("preempted sample: value %d, reason %q", s1.Values().At(0), reason(s1))
	}
	// The on-CPU profile is untouched by the off-CPU samples.
	if n := profs.At(0).Samples().Len(); n != 3 {
		t.Errorf("%d on-CPU samples, want 3", n)
	}
	if profs := rps.At(1).ScopeProfiles().At(0).Profiles(); profs.Len() != 1 || typeOf(profs.At(0)) != "samples/count" {
		t.Errorf("on-CPU-only process: %d profiles", profs.Len())
	}
	if profs := rps.At(2).ScopeProfiles().At(0).Profiles(); profs.Len() != 1 || typeOf(profs.At(0)) != "off_cpu/nanoseconds" {
		t.Errorf("off-CPU-only process: %d profiles, want only off_cpu", profs.Len())
	}
}
