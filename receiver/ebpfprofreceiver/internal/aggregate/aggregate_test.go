package aggregate

import (
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/process"
)

// TestAggregateCountsAndBounds adds samples of a few stacks and checks the
// counts, the per-interval bound on distinct stacks, and that Flush starts
// a new interval.
func TestAggregateCountsAndBounds(t *testing.T) {
	textMapping := process.Mapping{Start: 0, End: 0x1000, Perms: "r-xp"}
	reads := 0
	a := New(Config{
		MaxStacks:     2,
		MaxTimestamps: 3,
		ProcessInfo: func(pid int) (*Process, error) {
			reads++
			// Every frame of the samples below is in this mapping.
			return &Process{PID: pid, Info: process.Info{ExePath: "/proc/self/exe"}, Mappings: []frame.Mapping{{Mapping: textMapping}}}, nil
		},
	})
	sample := func(tid uint32, user ...uint64) *profiler.Sample {
		return &profiler.Sample{PID: uint32(os.Getpid()), TID: tid, Comm: "t", KtimeNs: 1, User: user}
	}
	withKernel := &profiler.Sample{PID: uint32(os.Getpid()), TID: 3, Comm: "t", KtimeNs: 1,
		Kernel: []uint64{0xffff_0100, 0xffff_0200}, User: []uint64{0x10}}
	a.Add(sample(1, 0x10, 0x20))
	a.Add(sample(1, 0x10, 0x20))
	a.Add(sample(2, 0x10, 0x20)) // another thread: another stack
	a.Add(sample(1, 0x30))       // a third stack: over MaxStacks
	a.Add(sample(1, 0x10, 0x20))

	b := a.Flush(time.Now())
	if len(b.Stacks) != 2 {
		t.Fatalf("%d stacks, want 2", len(b.Stacks))
	}
	if b.Stacks[0].Count != 3 || b.Stacks[1].Count != 1 {
		t.Fatalf("counts %d, %d; want 3, 1", b.Stacks[0].Count, b.Stacks[1].Count)
	}
	if b.Stats.Samples != 5 || b.Stats.DroppedStacksFull != 1 {
		t.Fatalf("stats %+v", b.Stats)
	}
	if n := len(b.Stacks[0].Timestamps) + len(b.Stacks[1].Timestamps); n != 3 {
		t.Fatalf("%d timestamps kept, want MaxTimestamps=3", n)
	}
	// The caller's return address is looked up one byte lower, once, here.
	if f := b.Stacks[0].Frames; len(f) != 2 || f[0].ReturnAddress || !f[1].ReturnAddress || f[0].Address != 0x10 || f[1].Address != 0x1f {
		t.Fatalf("leaf must be a PC and callers return addresses minus 1: %+v", f)
	}
	if reads != 1 {
		t.Fatalf("process read %d times in one interval, want 1", reads)
	}

	a.Add(withKernel)
	b = a.Flush(time.Now())
	// Kernel frames come first, the interrupted PC as it is and the return
	// addresses one byte lower, then the user frames.
	if len(b.Stacks) != 1 {
		t.Fatalf("%d stacks, want 1", len(b.Stacks))
	}
	want := []frame.Frame{
		{Type: frame.Kernel, Address: 0xffff_0100},
		{Type: frame.Kernel, Address: 0xffff_01ff, ReturnAddress: true},
		{Type: frame.Native, Address: 0x10, Mapping: &frame.Mapping{Mapping: textMapping}},
	}
	if got := b.Stacks[0].Frames; !reflect.DeepEqual(got, want) {
		t.Fatalf("frames %+v, want %+v", got, want)
	}

	a.Add(sample(1, 0x30))
	if b := a.Flush(time.Now()); len(b.Stacks) != 1 || b.Stats.Samples != 1 || b.Stats.DroppedStacksFull != 0 {
		t.Fatalf("second interval: %d stacks, stats %+v", len(b.Stacks), b.Stats)
	}
}

// TestAggregateOffCPU checks that off-CPU events of a stack are kept apart
// from its on-CPU samples and by how the thread left the CPU, and that their
// times add up.
func TestAggregateOffCPU(t *testing.T) {
	a := New(Config{ProcessInfo: func(pid int) (*Process, error) {
		return &Process{PID: pid, Mappings: []frame.Mapping{{Mapping: process.Mapping{Start: 0, End: 0x1000, Perms: "r-xp"}}}}, nil
	}})
	sample := func(offCPU bool, ns uint64, preempted bool) *profiler.Sample {
		return &profiler.Sample{PID: uint32(os.Getpid()), TID: 1, Comm: "t", KtimeNs: 1, User: []uint64{0x10, 0x20},
			Kernel: []uint64{0xffff_0100}, OffCPU: offCPU, OffCPUNs: ns, Preempted: preempted}
	}
	a.Add(sample(false, 0, false))
	a.Add(sample(true, 3_000_000, false))
	a.Add(sample(true, 5_000_000, false))
	a.Add(sample(true, 7_000_000, true))
	a.Add(sample(false, 0, true)) // on-CPU: the flag means nothing
	b := a.Flush(time.Now())
	if len(b.Stacks) != 3 {
		t.Fatalf("%d stacks, want on-CPU, blocked and preempted", len(b.Stacks))
	}
	on, blocked, preempted := b.Stacks[0], b.Stacks[1], b.Stacks[2]
	if on.OffCPU || on.Count != 2 || on.OffCPUNs != 0 {
		t.Errorf("on-CPU stack %+v", on)
	}
	if !blocked.OffCPU || blocked.Preempted || blocked.Count != 2 || blocked.OffCPUNs != 8_000_000 {
		t.Errorf("blocked stack %+v", blocked)
	}
	// A switched-out task's kernel stack holds only return addresses; an
	// on-CPU sample's starts at the interrupted PC.
	if f := blocked.Frames[0]; !f.ReturnAddress || f.Address != 0xffff_00ff {
		t.Errorf("off-CPU kernel leaf %+v, want the return address minus 1", f)
	}
	if f := on.Frames[0]; f.ReturnAddress || f.Address != 0xffff_0100 {
		t.Errorf("on-CPU kernel leaf %+v, want the PC", f)
	}
	if !preempted.OffCPU || !preempted.Preempted || preempted.Count != 1 || preempted.OffCPUNs != 7_000_000 {
		t.Errorf("preempted stack %+v", preempted)
	}
}

// TestAggregateScopes checks that samples of one stack taken in different
// probe scopes, or outside any, are counted apart, each keeping its scope.
func TestAggregateScopes(t *testing.T) {
	a := New(Config{ProcessInfo: func(pid int) (*Process, error) {
		return &Process{PID: pid, Mappings: []frame.Mapping{{Mapping: process.Mapping{Start: 0, End: 0x1000, Perms: "r-xp"}}}}, nil
	}})
	x := scopes.Link{TraceID: [16]byte{1}, SpanID: [8]byte{2}, ProbeID: 3}
	y := scopes.Link{TraceID: [16]byte{1}, SpanID: [8]byte{4}, ProbeID: 3}
	sample := func(in bool, l scopes.Link) *profiler.Sample {
		return &profiler.Sample{PID: uint32(os.Getpid()), TID: 1, Comm: "t", KtimeNs: 1, User: []uint64{0x10, 0x20}, InScope: in, Scope: l}
	}
	a.Add(sample(true, x))
	a.Add(sample(true, y))
	a.Add(sample(true, x))
	a.Add(sample(false, scopes.Link{}))
	b := a.Flush(time.Now())
	if len(b.Stacks) != 3 {
		t.Fatalf("%d stacks, want one per scope and one outside", len(b.Stacks))
	}
	if s := b.Stacks[0]; s.Scope == nil || *s.Scope != x || s.Count != 2 {
		t.Errorf("first scope's stack: %+v", s)
	}
	if s := b.Stacks[1]; s.Scope == nil || *s.Scope != y || s.Count != 1 {
		t.Errorf("second scope's stack: %+v", s)
	}
	if s := b.Stacks[2]; s.Scope != nil || s.Count != 1 {
		t.Errorf("stack outside scopes: %+v", s)
	}
}

// lateMappingAggregator aggregates samples of a process whose text is at
// 0x1000-0x2000 and which maps late only after its first read of
// *reads, as a runtime maps its JIT code.
func lateMappingAggregator(reads *int, late process.Mapping) *Aggregator {
	text := process.Mapping{Start: 0x1000, End: 0x2000, Perms: "r-xp"}
	return New(Config{ProcessInfo: func(pid int) (*Process, error) {
		*reads++
		p := &Process{PID: pid, Info: process.Info{ExePath: "/proc/self/exe"}, Mappings: []frame.Mapping{{Mapping: text}}}
		if *reads > 1 {
			p.Mappings = append(p.Mappings, frame.Mapping{Mapping: late})
		}
		return p, nil
	}})
}

// userSample is an on-CPU sample of this process with the user stack user.
func userSample(user ...uint64) *profiler.Sample {
	return &profiler.Sample{PID: uint32(os.Getpid()), TID: 1, Comm: "t", KtimeNs: 1, UserIP: user[0], User: user}
}

// TestAggregateCountsCutUserStacks feeds samples whose user frames cannot
// all be kept: a leaf in a mapping the first read of the process missed
// (kept: the mappings are read again at once), a leaf in no mapping even
// read again (the user stack dropped, counted, and the mappings not read
// again for the next such sample), and a stack reaching an impossible
// address (cut there, counted).
func TestAggregateCountsCutUserStacks(t *testing.T) {
	reads := 0
	a := lateMappingAggregator(&reads, process.Mapping{Start: 0x8000, End: 0x9000, Perms: "r-xp"})
	sample := userSample
	a.Add(sample(0x1010, 0x1020))
	a.Add(sample(0x8010, 0x1020))    // in the JIT region: read again, kept
	a.Add(sample(0x5010, 0x1020))    // in nothing, even read again: dropped
	a.Add(sample(0x5020, 0x1020))    // no read again so soon: dropped
	a.Add(sample(0x1010, 0x1020, 0)) // cut at 0
	b := a.Flush(time.Now())

	if reads != 3 {
		t.Errorf("process read %d times, want 3: once, again for the JIT region, once more for the unmapped leaf", reads)
	}
	if b.Stats.UnmappedLeaves != 2 || b.Stats.TruncatedStacks != 1 {
		t.Errorf("stats %+v, want 2 unmapped leaves and 1 truncated stack", b.Stats)
	}
	userFrames := map[uint64]int{}
	for _, s := range b.Stacks {
		if len(s.Frames) > 0 {
			userFrames[s.Frames[0].Address] = len(s.Frames)
		} else {
			userFrames[0] += int(s.Count) * 1000
		}
	}
	if userFrames[0x8010] != 2 {
		t.Errorf("the sample in the JIT region kept %d frames, want 2: %v", userFrames[0x8010], userFrames)
	}
	if userFrames[0] != 2000 {
		t.Errorf("want the two samples in no mapping without frames: %v", userFrames)
	}
}

// TestAggregateRereadsForCallers: a caller in a mapping made after the
// process was read (a runtime's JIT code, under a leaf in libc: an
// off-CPU wait) has the mappings read again, and is kept, with the stack
// under it; a caller in no mapping even read again cuts the stack there,
// and the next such one within the interval reads nothing.
func TestAggregateRereadsForCallers(t *testing.T) {
	jit := process.Mapping{Start: 0x8000, End: 0x9000, Perms: "rwxp"}
	reads := 0
	a := lateMappingAggregator(&reads, jit)
	sample := userSample
	a.Add(sample(0x1010, 0x1020))
	a.Add(sample(0x1010, 0x8020, 0x1030)) // a caller in the JIT region: read again, kept
	a.Add(sample(0x1010, 0x5020, 0x1040)) // in nothing, even read again: cut
	a.Add(sample(0x1010, 0x5030, 0x1050)) // no read again so soon: cut
	b := a.Flush(time.Now())
	if reads != 3 {
		t.Errorf("process read %d times, want 3: once, again for the JIT caller, once more for the unmapped one", reads)
	}
	if b.Stats.TruncatedStacks != 2 {
		t.Errorf("stats %+v, want 2 truncated stacks", b.Stats)
	}
	for _, st := range b.Stacks {
		if len(st.Frames) > 1 && st.Frames[1].Address == 0x8020-1 {
			if len(st.Frames) != 3 || st.Frames[1].Mapping == nil || st.Frames[1].Mapping.Start != jit.Start || len(st.Process.Mappings) != 2 {
				t.Errorf("the stack through the JIT caller: %+v, its process's mappings %+v", st.Frames, st.Process.Mappings)
			}
			return
		}
	}
	t.Errorf("no stack kept its JIT caller: %+v", b.Stacks)
}

// TestAggregateKeepsStackUnderUretprobe checks a process with a [uprobes]
// page, whose functions run under uretprobes: the sampler hands over their
// real return addresses, taken back from the kernel, and every one is kept,
// so the stack is whole. A frameless leaf's return address at SP, also
// taken back, is its lost caller; the trampoline itself, where the kernel
// did not give the address, is none.
func TestAggregateKeepsStackUnderUretprobe(t *testing.T) {
	text := process.Mapping{Start: 0x1000, End: 0x2000, Perms: "r-xp"}
	uprobes := process.Mapping{Start: 0x7fffffffe000, End: 0x7ffffffff000, Perms: "--xp", Path: "[uprobes]"}
	proc := &Process{PID: os.Getpid(), Info: process.Info{ExePath: "/proc/self/exe"}, Mappings: []frame.Mapping{{Mapping: text}, {Mapping: uprobes}}}
	a := New(Config{ProcessInfo: func(int) (*Process, error) { return proc, nil }})
	s := &profiler.Sample{PID: uint32(os.Getpid()), TID: 1, Comm: "t", KtimeNs: 1, UserIP: 0x1010, CFI: true, Complete: true,
		User: []uint64{0x1010, 0x1020, 0x1030, 0x1040}}
	a.Add(s)
	b := a.Flush(time.Now())
	if len(b.Stacks) != 1 {
		t.Fatalf("%d stacks, want 1", len(b.Stacks))
	}
	frames := b.Stacks[0].Frames
	if len(frames) != 4 || b.Stats.TruncatedStacks != 0 {
		t.Errorf("%d frames, %d stacks cut; want the 4 frames: %+v", len(frames), b.Stats.TruncatedStacks, frames)
	}
	for _, f := range frames {
		if f.Mapping == nil || f.Mapping.Path == uprobes.Path {
			t.Errorf("frame at %#x not in the text: %+v", f.Address, frames)
		}
	}

	s.LeafWords = [2]uint64{uprobes.Start, 0x1020}
	if a.leaves.candidate(proc, s, 0) {
		t.Errorf("the trampoline at SP taken for a lost caller")
	}
	s.LeafWords[0] = 0x1050
	if !a.leaves.candidate(proc, s, 0) {
		t.Errorf("a return address into the text at SP not taken for a lost caller")
	}
}
