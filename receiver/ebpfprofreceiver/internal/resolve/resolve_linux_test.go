package resolve

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/aggregate"
)

//go:noinline
func probeTarget() int { return len(os.Args) }

// ownProcess describes this test process the way the aggregator would.
func ownProcess(t *testing.T) *aggregate.Process {
	t.Helper()
	maps, err := process.ReadMappings(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var exec []frame.Mapping
	for _, m := range maps {
		if m.Executable() {
			exec = append(exec, frame.Mapping{Mapping: m})
		}
	}
	exe, err := process.ExecutablePath(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return &aggregate.Process{PID: os.Getpid(), ExePath: exe, ExeName: filepath.Base(exe), Mappings: exec}
}

// TestResolveOwnFrames resolves frames of this very test binary: a PC at a
// known function, the same address as a return address, and an address in
// no mapping; and checks names, addresses, mappings and counters.
func TestResolveOwnFrames(t *testing.T) {
	proc := ownProcess(t)
	fn := uint64(reflect.ValueOf(probeTarget).Pointer())
	want := runtime.FuncForPC(uintptr(fn)).Name()
	m := proc.Mapping(fn)
	if m == nil {
		t.Fatalf("no executable mapping holds %#x", fn)
	}
	const unmapped = 0x10 // the zero page is never mapped
	inMapping := func(f frame.Frame) frame.Frame { f.Mapping = m; return f }
	batch := &aggregate.Batch{Stacks: []*aggregate.Stack{
		{Process: proc, PID: uint32(proc.PID), TID: 7, Comm: "tester", Count: 3, Timestamps: []uint64{1, 2, 3},
			Frames: []frame.Frame{
				inMapping(frame.AtPC(frame.Native, fn+1)),
				inMapping(frame.AtReturnAddress(frame.Native, fn+1)),
				frame.AtReturnAddress(frame.Native, unmapped),
			}},
		{Process: proc, PID: uint32(proc.PID), TID: 8, Comm: "other", Count: 1,
			Frames: []frame.Frame{inMapping(frame.AtPC(frame.Native, fn+1))}},
	}}

	cache := symbolize.NewBinaryCache(8)
	defer cache.Close()
	r := New(cache, nil)
	procs := r.Resolve(batch)
	stats := r.Stats()

	if len(procs) != 1 || procs[0].PID != int64(proc.PID) || procs[0].ExePath != proc.ExePath || len(procs[0].Samples) != 2 {
		t.Fatalf("want one process with two samples, got %+v", procs)
	}
	s := procs[0].Samples[0]
	if s.Count != 3 || s.ThreadID != 7 || s.ThreadName != "tester" || len(s.Timestamps) != 3 || len(s.Frames) != 3 {
		t.Fatalf("sample %+v", s)
	}
	pc, ret, none := s.Frames[0], s.Frames[1], s.Frames[2]
	for _, f := range []frame.Frame{pc, ret} {
		if f.Name() != want {
			t.Fatalf("frame %#x named %+v, want %s", f.Address, f.Lines, want)
		}
		if f.Type != frame.Go || f.Mapping == nil || f.Mapping.Path != m.Path || f.Mapping.BuildIDGo == "" {
			t.Fatalf("frame %#x: type %q mapping %+v", f.Address, f.Type, f.Mapping)
		}
	}
	// The return address names the call before it: one byte lower.
	if ret.Address != pc.Address-1 {
		t.Fatalf("return address %#x, PC %#x: want PC-1", ret.Address, pc.Address)
	}
	// An unmapped return address keeps its lookup address.
	if none.Mapping != nil || len(none.Lines) != 0 || none.Address != unmapped-1 || !none.ReturnAddress {
		t.Fatalf("unmapped frame %+v", none)
	}
	// Four user frames: three named, one unmapped.
	if stats != (Stats{UserNamed: 3, UserUnmapped: 1}) {
		t.Fatalf("stats %+v", stats)
	}
	// The second sample's PC was named from the cache.
	if c := r.NameCacheStats(); c.Len != 2 || c.Hits != 1 {
		t.Fatalf("name cache %+v, want 2 entries and 1 hit", c)
	}
}
