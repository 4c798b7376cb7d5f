// Package aggregate attributes stack samples to processes and their file
// mappings, puts back the caller that frame-pointer walking loses under a
// frameless function, and counts identical stacks over a report interval.
// It runs on its own goroutine, off the ringbuf-draining path.
package aggregate

import (
	"encoding/binary"
	"os"
	"slices"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

// Config bounds an Aggregator.
type Config struct {
	// MaxStacks bounds the distinct stacks kept per interval; samples of
	// further stacks are dropped and counted.
	MaxStacks int
	// MaxTimestamps bounds the sample timestamps kept per interval; beyond
	// it samples are still counted, without a timestamp.
	MaxTimestamps int
	// MaxProcesses bounds the process table.
	MaxProcesses int
	// Binaries caches opened binaries; the aggregator opens every binary it
	// sees a sample in, so it can still be read after its process exits.
	// Nil opens none, and recovers no frameless leaf's caller.
	Binaries Binaries
	// ProcessInfo reads a process's metadata; nil takes it from
	// Snapshots, else reads /proc.
	ProcessInfo func(pid int) (*Process, error)
	// Snapshots, when set, holds the mappings of processes that exited
	// before their samples were read, and opens the files behind them.
	Snapshots *process.Snapshots
	// Interpreters, when set, places and reads a sample's interpreted
	// frames.
	Interpreters Interpreters
}

// Interpreters follows the processes that run an interpreter
// (*interp.Manager).
type Interpreters interface {
	// Loops gives the address ranges of a process's interpreter loop,
	// nil for a process that runs no interpreter followed: a sample's
	// interpreted frames go among its native frames at the loop frames
	// that run them.
	Loops(pid uint32) []interp.Range
	// Read reads, while the process still runs, what names an
	// interpreted frame of a stack first seen in this interval.
	Read(pid uint32, f *frame.Frame)
	// Place says how f, a JIT runtime's frame, goes with native, the
	// native frame at its anchor.
	Place(pid uint32, native, f *frame.Frame) interp.Placement
	// NewInterval says an interval ended.
	NewInterval()
}

// Process is what the profile says about one process.
type Process struct {
	PID int
	process.Info
	// Mappings are the process's executable mappings, which its user
	// frames point at.
	Mappings []frame.Mapping

	held map[process.FileKey]struct{} // binaries already opened into the cache
}

// Mapping returns the executable mapping holding addr, or nil.
func (p *Process) Mapping(addr uint64) *frame.Mapping {
	for i := range p.Mappings {
		if p.Mappings[i].Contains(addr) {
			return &p.Mappings[i]
		}
	}
	return nil
}

// Stack is one distinct stack of one thread with its count.
type Stack struct {
	// Process is nil when the process could not be read.
	Process *Process
	PID     uint32
	TID     uint32
	Comm    string
	// Frames holds the kernel frames, the interrupted PC first, then the
	// user frames, the leaf first. Return addresses are already adjusted
	// (frame.AtReturnAddress); user frames point at their mapping in
	// Process, kernel frames have none yet.
	Frames     []frame.Frame
	Count      int64
	Timestamps []uint64
	// OffCPU marks a stack of off-CPU events: Count of them, the thread's
	// stacks at switch-out, Timestamps the switch-outs, OffCPUNs their
	// total time off CPU. Preempted says the thread was still runnable
	// rather than blocked.
	OffCPU    bool
	Preempted bool
	OffCPUNs  int64
	// Scope is the probe scope open when the samples were taken (or the
	// thread blocked); nil outside any.
	Scope *scopes.Link
}

// Stats counts what happened to the samples of one interval.
type Stats struct {
	// Samples is how many samples were added.
	Samples int64
	// DroppedStacksFull counts samples dropped because MaxStacks was hit.
	DroppedStacksFull int64
	// CallersRecovered counts samples whose frameless leaf's caller was put
	// back from the word at SP.
	CallersRecovered int64
	// UnknownProcesses counts samples of processes whose /proc entry could
	// not be read (usually gone already).
	UnknownProcesses int64
	// TruncatedStacks counts user stacks cut at an impossible address
	// (zero, non-canonical, or in no executable mapping).
	TruncatedStacks int64
	// UnmappedLeaves counts samples of a read process whose leaf is in
	// none of its executable mappings, even read again: no frame of the
	// user stack can be checked, and none is kept.
	UnmappedLeaves int64
	// UnplacedInterpreted counts samples with interpreted frames that
	// found no interpreter-loop frame to go under (the native stack was
	// cut before it): they were put at the root end of the stack.
	UnplacedInterpreted int64
}

// Batch is everything aggregated over one interval.
type Batch struct {
	Start, End time.Time
	Stacks     []*Stack
	Stats      Stats
}

// Samples returns how many samples the batch's stacks hold.
func (b *Batch) Samples() int64 {
	var n int64
	for _, s := range b.Stacks {
		n += s.Count
	}
	return n
}

// Aggregator collects samples into a Batch. It is not safe for concurrent
// use: one goroutine adds samples and flushes.
type Aggregator struct {
	cfg        Config
	stacks     map[string]*Stack
	order      []*Stack
	timestamps int
	stats      Stats
	start      time.Time
	procs      *processTable
	leaves     *leafAnalyzer
	key        []byte
	scratch    []frame.Frame // the frames of the sample being added
	placed     []frame.Frame // the frames with interpreted ones placed
	// userIndex holds, for each user frame of the sample being added,
	// its index in the sample's User, -1 for a frame not from there.
	userIndex []int
	clock     ktime.Clock // refreshed every interval, so wall-clock steps are followed
	// sampleKtime is when the sample being added was taken.
	sampleKtime uint64
}

// New returns an empty Aggregator.
func New(cfg Config) *Aggregator {
	if cfg.MaxStacks <= 0 {
		cfg.MaxStacks = 16384
	}
	if cfg.MaxTimestamps <= 0 {
		cfg.MaxTimestamps = 1 << 20
	}
	if cfg.MaxProcesses <= 0 {
		cfg.MaxProcesses = 8192
	}
	var a *Aggregator
	if cfg.ProcessInfo == nil {
		// A snapshot is taken only for a sample of its process's
		// lifetime: Add notes the sample's time first.
		cfg.ProcessInfo = func(pid int) (*Process, error) {
			return readProcess(pid, cfg.Snapshots, a.sampleKtime, a.procs.missed)
		}
	}
	a = &Aggregator{
		cfg:    cfg,
		stacks: map[string]*Stack{},
		procs:  newProcessTable(cfg.MaxProcesses, cfg.ProcessInfo),
		leaves: newLeafAnalyzer(cfg.Binaries),
		start:  time.Now(),
	}
	if cfg.Snapshots != nil {
		a.procs.snapshot = cfg.Snapshots.Seq
	}
	a.clock.Refresh()
	return a
}

// Add attributes one sample and counts it.
func (a *Aggregator) Add(s *profiler.Sample) {
	a.stats.Samples++
	a.sampleKtime = s.KtimeNs
	proc := a.procs.lookup(int(s.PID), s.UserIP)
	if proc == nil {
		a.stats.UnknownProcesses++
	}

	frames, proc := a.frames(proc, s)
	key := a.stackKey(s, frames)
	st, ok := a.stacks[string(key)]
	if !ok {
		if len(a.stacks) >= a.cfg.MaxStacks {
			a.stats.DroppedStacksFull++
			return
		}
		st = &Stack{
			Process: proc,
			PID:     s.PID,
			TID:     s.TID,
			Comm:    s.Comm,
			Frames:  slices.Clone(frames),
			OffCPU:  s.OffCPU,
			// Only off-CPU events say how the thread left the CPU.
			Preempted: s.OffCPU && s.Preempted,
		}
		if s.InScope {
			scope := s.Scope
			st.Scope = &scope
		}
		if len(s.Interp) > 0 && a.cfg.Interpreters != nil {
			for i := range st.Frames {
				if st.Frames[i].Type.Interpreted() {
					a.cfg.Interpreters.Read(s.PID, &st.Frames[i])
				}
			}
		}
		a.stacks[string(key)] = st
		a.order = append(a.order, st)
	}
	st.Count++
	if s.OffCPU {
		st.OffCPUNs += int64(s.OffCPUNs)
	}
	if a.timestamps < a.cfg.MaxTimestamps {
		st.Timestamps = append(st.Timestamps, uint64(a.clock.UnixNanos(s.KtimeNs)))
		a.timestamps++
	}
}

// frames turns the sample's raw addresses into frames: the kernel stack,
// then the user stack with the caller a frameless leaf hid put back. The
// slice is reused by the next sample. The process is returned as read
// again when a frame was outside its mappings.
func (a *Aggregator) frames(proc *Process, s *profiler.Sample) ([]frame.Frame, *Process) {
	frames := a.scratch[:0]
	defer func() { a.scratch = frames[:0] }()
	for i, addr := range s.Kernel {
		// An off-CPU kernel stack is a switched-out task's: every
		// frame is a return address.
		if i == 0 && !s.OffCPU {
			frames = append(frames, frame.AtPC(frame.Kernel, addr))
		} else {
			frames = append(frames, frame.AtReturnAddress(frame.Kernel, addr))
		}
	}
	// Without the process's mappings no user frame can be checked (it
	// exited before it was read, or was exiting: its maps were empty):
	// none is emitted.
	if len(s.User) == 0 || proc == nil {
		return frames, proc
	}
	// A frame the interpreters' walk found in its own code (a JIT's) is
	// kept even where no mapping was read: it is named from its object.
	var jit [2]uint64
	for i := range s.Interp {
		if f := &s.Interp[i]; f.AtNative && f.Anchor < 128 {
			jit[f.Anchor/64] |= 1 << (f.Anchor % 64)
		}
	}
	isJIT := func(i int) bool { return i < 128 && jit[i/64]&(1<<(i%64)) != 0 }
	leaf := frame.AtPC(frame.Native, s.User[0])
	if !isJIT(0) && !possibleFrame(proc, leaf) {
		a.stats.UnmappedLeaves++
		return frames, proc
	}
	user := len(frames)
	mapped := func(f frame.Frame) frame.Frame {
		f.Mapping = proc.Mapping(f.Address)
		return f
	}
	leaf = mapped(leaf)
	frames = append(frames, leaf)
	a.userIndex = append(a.userIndex[:0], 0)
	// A CFI walk found the leaf's caller exactly; only a frame pointer
	// can have lost it.
	if !s.CFI || s.LeafFramePointer {
		if caller, ok := a.leaves.lostCaller(proc, leaf, s); ok {
			frames = append(frames, mapped(frame.AtReturnAddress(frame.Native, caller)))
			a.userIndex = append(a.userIndex, -1)
			a.stats.CallersRecovered++
		}
	}
	for i, addr := range s.User[1:] {
		f := frame.AtReturnAddress(frame.Native, addr)
		if s.IsPC(i + 1) {
			f = frame.AtPC(frame.Native, addr)
		}
		// A frame-pointer walk through code without frame pointers reads
		// garbage: an impossible address ends the stack. Unless it is in
		// a mapping made since the process was read (JIT code a runtime
		// mapped later, under a leaf in a library): read again, as for
		// a leaf, rate-limited. A frame the interpreters' walk found
		// there is kept in any case.
		if !possibleFrame(proc, f) {
			if p := a.procs.lookup(int(s.PID), f.Address); p != nil && possibleFrame(p, f) {
				proc = p
			} else if !isJIT(i + 1) {
				a.stats.TruncatedStacks++
				break
			}
		}
		frames = append(frames, mapped(f))
		a.userIndex = append(a.userIndex, i+1)
	}
	a.holdBinaries(proc, frames[user:])
	if len(s.Interp) > 0 && a.cfg.Interpreters != nil {
		frames = a.placeInterpreted(proc, frames, user, s)
	}
	return frames, proc
}

// interpTypes maps the sampler's interpreter frame kinds to frame types.
var interpTypes = map[profiler.InterpKind]frame.Type{
	profiler.InterpCPython:   frame.CPython,
	profiler.InterpTruncated: frame.CPython,
	profiler.InterpHotSpot:   frame.JVM,
	profiler.InterpV8:        frame.V8JS,
}

// placeInterpreted puts the sample's interpreter frames among its native
// user frames, frames[user:]. A frame the walk found as a native frame
// (a JIT's, flagged AtNative) goes where that native frame is, as its
// runtime says (placeJIT). The others, an interpreter loop's, go right
// leafward of the native frame of the loop call that runs them (the k-th
// from the leaf in the interpreter's loop); what finds no loop frame (the
// native stack was cut before) goes at the root end, in order.
func (a *Aggregator) placeInterpreted(proc *Process, frames []frame.Frame, user int, s *profiler.Sample) []frame.Frame {
	loops := a.cfg.Interpreters.Loops(s.PID)
	out := append(a.placed[:0], frames[:user]...)
	next, call := 0, uint16(0)
	take := func(upTo uint16) {
		for ; next < len(s.Interp) && (s.Interp[next].AtNative || s.Interp[next].Anchor <= upTo); next++ {
			if !s.Interp[next].AtNative {
				out = append(out, interpFrame(&s.Interp[next]))
			}
		}
	}
	jit := 0 // the next JIT frame of s.Interp, in anchor order
	native := frames[user:]
	for i := 0; i < len(native); i++ {
		f := native[i]
		if inRanges(loops, f.Address) {
			take(call)
			call++
		}
		u := a.userIndex[i]
		for jit < len(s.Interp) && (!s.Interp[jit].AtNative || int(s.Interp[jit].Anchor) < u) {
			jit++
		}
		if u < 0 || jit == len(s.Interp) || int(s.Interp[jit].Anchor) != u {
			out = append(out, f)
			continue
		}
		var took bool
		out, took = a.placeJIT(proc, s, native, i, interpFrame(&s.Interp[jit]), out)
		if took {
			i++
		}
	}
	if next < len(s.Interp) {
		for _, f := range s.Interp[next:] {
			if !f.AtNative {
				a.stats.UnplacedInterpreted++
				break
			}
		}
		take(^uint16(0))
	}
	// The sample's frames are copied out by Add: frames and out swap
	// roles for the next sample.
	a.placed = frames
	return out
}

// interpFrame turns a sampler's interpreter frame into a frame.
func interpFrame(f *profiler.InterpFrame) frame.Frame {
	typ := interpTypes[f.Kind]
	if f.Kind == profiler.InterpTruncated {
		return frame.Frame{Type: typ, Truncated: true}
	}
	out := frame.Interpreted(typ, f.Object, f.Offset)
	if f.NoOffset {
		out.Offset = frame.NoOffset
	}
	return out
}

func inRanges(ranges []interp.Range, addr uint64) bool {
	for _, r := range ranges {
		if r.Contains(addr) {
			return true
		}
	}
	return false
}

// possibleFrame reports whether f can be a user frame of proc: not zero,
// canonical, and in one of its executable mappings. A return address is
// checked where its frame is looked up, one byte lower: one that is the
// first byte of a mapping has its call in none. The uretprobe trampoline,
// which stands in for the return address of a function under a uretprobe,
// is such an address: the first byte of [uprobes].
func possibleFrame(proc *Process, f frame.Frame) bool {
	return f.Address != 0 && f.Address <= process.MaxUserAddr && proc.Mapping(f.Address) != nil
}

// stackKey serializes what makes two samples the same stack.
func (a *Aggregator) stackKey(s *profiler.Sample, frames []frame.Frame) []byte {
	k := a.key[:0]
	k = binary.LittleEndian.AppendUint32(k, s.PID)
	k = binary.LittleEndian.AppendUint32(k, s.TID)
	k = append(k, s.Comm...)
	k = append(k, 0)
	k = binary.LittleEndian.AppendUint32(k, uint32(len(s.Kernel)))
	var kind byte
	if s.OffCPU {
		kind = 1
		if s.Preempted {
			kind = 2
		}
	}
	k = append(k, kind)
	// Samples of different scopes are different samples: each links to
	// its own scope.
	if s.InScope {
		k = append(k, 1)
		k = append(k, s.Scope.TraceID[:]...)
		k = append(k, s.Scope.SpanID[:]...)
		k = binary.LittleEndian.AppendUint32(k, s.Scope.ProbeID)
	} else {
		k = append(k, 0)
	}
	for _, f := range frames {
		k = binary.LittleEndian.AppendUint64(k, f.Address)
		if f.Type.Interpreted() {
			k = binary.LittleEndian.AppendUint32(k, f.Offset)
			k = binary.LittleEndian.AppendUint64(k, f.Native)
			if f.Truncated {
				k = append(k, 1)
			}
		}
	}
	a.key = k
	return k
}

// LeafCacheStats returns the counts of the cache of analysed leaf
// functions. It is safe to call from any goroutine.
func (a *Aggregator) LeafCacheStats() lru.Stats { return a.leaves.functions.Stats() }

// Flush returns what was aggregated since the last Flush and starts a new
// interval. Processes not seen for two intervals leave the process table.
func (a *Aggregator) Flush(now time.Time) *Batch {
	b := &Batch{Start: a.start, End: now, Stacks: a.order, Stats: a.stats}
	a.stacks = make(map[string]*Stack, len(a.stacks))
	a.order = nil
	a.timestamps = 0
	a.stats = Stats{}
	a.start = now
	a.procs.endInterval()
	a.clock.Refresh()
	if a.cfg.Interpreters != nil {
		a.cfg.Interpreters.NewInterval()
	}
	return b
}

// holdBinaries opens, once per process read, every binary a sample is in,
// so the binary is still there to symbolize after a short-lived process
// exits.
func (a *Aggregator) holdBinaries(proc *Process, frames []frame.Frame) {
	if proc == nil || a.cfg.Binaries == nil {
		return
	}
	for _, f := range frames {
		if f.Mapping == nil || !f.Mapping.File() {
			continue
		}
		m := &f.Mapping.Mapping
		key := m.Key()
		if _, ok := proc.held[key]; ok {
			continue
		}
		if proc.held == nil {
			proc.held = map[process.FileKey]struct{}{}
		}
		proc.held[key] = struct{}{}
		bin, err := a.cfg.Binaries.Open(key, func() (*os.File, error) { return a.cfg.Snapshots.Open(proc.PID, m) })
		if err == nil {
			bin.Release()
		}
	}
}
