// Package resolve names the frames of an aggregated batch: user frames
// through the binaries' symbol tables, kernel frames through a kernel
// symbolizer. It runs after aggregation, on the export goroutine.
package resolve

import (
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/perfmap"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/symbolize/kernelsym"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/aggregate"
)

// maxCachedNameBytes bounds the heap of the named user addresses kept
// across batches, least recently used out first: each distinct (binary,
// address) is named once, and again only after eviction. A busy host
// samples new addresses for a long time (an interpreter's, short-lived
// processes'): a bound the size of the hot set, about 7000 names, fills
// in the first minutes instead of growing the heap for a quarter hour.
const maxCachedNameBytes = 2 << 20

// nameMaxIdle is how long a named address stays cached unused. Under
// churn each new process samples start-up code (the loader, libc's and
// the runtimes' initialisation, an interpreter's imports) at addresses
// seldom seen again: without it the cache grew toward its bound for ten
// minutes and more, and the heap with it. Expired, it holds the addresses
// of the last minutes, a set that stops growing once they have passed.
const nameMaxIdle = lru.ChurnIdle

// namedCost is the heap an entry of the name cache holds: the key, the
// record and its lines with their strings.
func namedCost(_ nameKey, n named) int64 {
	c := int64(unsafe.Sizeof(nameKey{})+unsafe.Sizeof(named{})) + 64 // map and list overhead
	for _, l := range n.lines {
		c += int64(unsafe.Sizeof(l)) + int64(len(l.Name)+len(l.SystemName)+len(l.File))
	}
	return c
}

// Bounds on the perf maps read to name JIT frames: the processes held, and
// how often one file is read again for appended lines.
const (
	maxJITProcesses    = 256
	jitRefreshInterval = time.Second
)

// KernelSymbolizer names kernel addresses in one batch; *kernelsym.Symbolizer
// is one. Addresses come already adjusted (frame.AtReturnAddress), so every
// isReturn is false.
type KernelSymbolizer interface {
	Symbolize(addrs []uint64, isReturn []bool) ([]kernelsym.Symbol, error)
}

// Stats count the frames resolved since the Resolver was made, each frame
// under exactly one outcome. Frames are counted once per distinct stack of
// an interval, not per sample.
type Stats struct {
	// UserNamed counts user frames given at least a function name.
	UserNamed int64
	// UserUnnamed counts user frames in a readable binary that names
	// nothing at their address.
	UserUnnamed int64
	// UserUnmapped counts user frames outside any file mapping, or outside
	// the loaded segments of their file.
	UserUnmapped int64
	// UserUnreadable counts user frames whose binary could not be opened.
	UserUnreadable int64
	// UserSkipped counts user frames in binaries classified skip.
	UserSkipped int64
	// UserPending counts user frames whose debug info is being fetched;
	// they go out with their build id and address, named in a later
	// interval.
	UserPending int64
	// KernelNamed and KernelUnnamed count kernel frames.
	KernelNamed, KernelUnnamed int64
}

// outcome is what became of one frame, an index into Resolver.counts.
type outcome int

const (
	userNamed outcome = iota
	userUnnamed
	userUnmapped
	userUnreadable
	userSkipped
	userPending
	kernelNamed
	kernelUnnamed
	numOutcomes
	// notCounted is the outcome of an interpreted frame: the
	// interpreter's own metrics count its names.
	notCounted = numOutcomes
)

// rawFrame is a frame as the aggregator gives it, before naming. Stacks of
// a process share most of their frames (every caller of a hot leaf), and
// one batch names each of its distinct raw frames once.
type rawFrame struct {
	pid             uint32
	mapping         *frame.Mapping // the aggregator's: one per process
	address, native uint64
	offset          uint32
	typ             frame.Type
	ret, truncated  bool
}

func rawFrameOf(pid uint32, f *frame.Frame) rawFrame {
	return rawFrame{pid: pid, mapping: f.Mapping, address: f.Address, native: f.Native,
		offset: f.Offset, typ: f.Type, ret: f.ReturnAddress, truncated: f.Truncated}
}

// resolvedFrame is a named frame and what became of it.
type resolvedFrame struct {
	f       frame.Frame
	outcome outcome
}

// nameKey identifies a user address by its binary and file offset. The
// binary is its Binary's ID: files holding the same build share one
// Binary in the BinaryCache, so processes started from fresh copies of a
// deployment reuse the names of the first. What else a name depends on
// is the build's too (its debug files are found by build id), or the
// mapping's path, which skip keeps apart.
type nameKey struct {
	binary uint64
	offset uint64
	skip   bool // symbolize.SkipPath of the mapping's path
}

// named is the final answer for one user address.
type named struct {
	vaddr   uint64
	lines   []frame.Line
	outcome outcome
}

// Resolver names frames. Resolve must not be called concurrently; Stats and
// NameCacheStats may be, from any goroutine.
type Resolver struct {
	binaries *symbolize.BinaryCache
	// sym adds DWARF, debug files and debuginfod; nil names frames from
	// the mapped binary alone.
	sym    *symbolize.Symbolizer
	kernel KernelSymbolizer
	// names caches final answers; a frame whose debug info is on its way
	// is asked again next batch.
	names  *lru.Cache[nameKey, named]
	counts [numOutcomes]atomic.Int64
	// jit names frames in anonymous executable memory.
	jit *perfmap.Cache
	// snapshots opens the binaries of processes gone since their samples
	// (nil opens through /proc only).
	snapshots *process.Snapshots
	// interp names interpreted frames; nil leaves them unnamed.
	interp Interpreters
}

// Interpreters names interpreted frames (*interp.Manager).
type Interpreters interface {
	// BeginBatch starts the naming of a batch.
	BeginBatch()
	// Name returns the lines of f, an interpreted frame of process pid.
	Name(pid uint32, f *frame.Frame) []frame.Line
}

// WithInterpreters names interpreted frames through in.
func WithInterpreters(in Interpreters) Option {
	return func(r *Resolver) { r.interp = in }
}

// Option configures a Resolver.
type Option func(*Resolver)

// WithSymbolizer names user frames through s: per-mapping classification,
// separate debug files and debuginfod. The caller keeps ownership of s.
func WithSymbolizer(s *symbolize.Symbolizer) Option {
	return func(r *Resolver) { r.sym = s }
}

// WithSnapshots opens the binaries of processes that exited through the
// files their snapshots hold.
func WithSnapshots(s *process.Snapshots) Option {
	return func(r *Resolver) { r.snapshots = s }
}

// New returns a Resolver. kernel may be nil: kernel frames then keep only
// their addresses.
func New(binaries *symbolize.BinaryCache, kernel KernelSymbolizer, opts ...Option) *Resolver {
	r := &Resolver{
		binaries: binaries,
		kernel:   kernel,
		names:    lru.New(maxCachedNameBytes, namedCost),
		jit:      perfmap.New(maxJITProcesses, jitRefreshInterval),
	}
	r.names.SetMaxIdle(nameMaxIdle)
	for _, o := range opts {
		o(r)
	}
	return r
}

// Stats returns the frame counts so far.
func (r *Resolver) Stats() Stats {
	c := func(o outcome) int64 { return r.counts[o].Load() }
	return Stats{
		UserNamed:      c(userNamed),
		UserUnnamed:    c(userUnnamed),
		UserUnmapped:   c(userUnmapped),
		UserUnreadable: c(userUnreadable),
		UserSkipped:    c(userSkipped),
		UserPending:    c(userPending),
		KernelNamed:    c(kernelNamed),
		KernelUnnamed:  c(kernelUnnamed),
	}
}

// NameCacheStats returns the counts of the cache of named user addresses.
func (r *Resolver) NameCacheStats() lru.Stats { return r.names.Stats() }

// batchState holds what one Resolve opened, released at its end.
type batchState struct {
	binaries map[process.FileKey]*symbolize.Binary
	// mappings are the batch's copies of the aggregator's mappings, with
	// build ids: the aggregator keeps using its own.
	mappings map[*frame.Mapping]*frame.Mapping
	kernel   map[uint64]kernelsym.Symbol
	// modules holds one mapping per kernel module seen.
	modules map[string]*frame.Mapping
	// named holds every distinct frame of the batch, named.
	named map[rawFrame]resolvedFrame
}

// Resolve names every frame of b and groups the stacks by process.
func (r *Resolver) Resolve(b *aggregate.Batch) []Process {
	st := &batchState{
		binaries: map[process.FileKey]*symbolize.Binary{},
		mappings: map[*frame.Mapping]*frame.Mapping{},
		modules:  map[string]*frame.Mapping{},
		named:    map[rawFrame]resolvedFrame{},
	}
	defer func() {
		for _, bin := range st.binaries {
			if bin != nil {
				// The names are in the name cache now: the pages of
				// the file read for them need not stay resident.
				bin.DropPages()
				bin.Release()
			}
		}
		// Names not used lately go even in a batch that added none.
		r.names.RemoveIdle()
	}()
	st.kernel = r.resolveKernel(b)
	if r.interp != nil {
		r.interp.BeginBatch()
	}

	byPID := map[uint32]int{}
	var procs []Process
	for _, s := range b.Stacks {
		idx, ok := byPID[s.PID]
		if !ok {
			idx = len(procs)
			byPID[s.PID] = idx
			p := Process{PID: int64(s.PID)}
			if s.Process != nil {
				p.Info = s.Process.Info
			}
			procs = append(procs, p)
		}
		frames := make([]frame.Frame, len(s.Frames))
		for i := range s.Frames {
			frames[i] = r.frame(st, s.PID, &s.Frames[i])
		}
		sample := Sample{
			Frames:     frames,
			Count:      s.Count,
			Timestamps: s.Timestamps,
			ThreadID:   int64(s.TID),
			ThreadName: s.Comm,
			// Scope has the fields of the aggregator's scopes.Link:
			// the pointer converts without a copy, and stops compiling
			// if the two part.
			Scope: (*Scope)(s.Scope),
		}
		if s.OffCPU {
			sample.OffCPUNs, sample.Preempted = s.OffCPUNs, s.Preempted
			procs[idx].OffCPUSamples = append(procs[idx].OffCPUSamples, sample)
		} else {
			procs[idx].Samples = append(procs[idx].Samples, sample)
		}
	}
	return procs
}

// frame names f, a frame of process pid, once per batch; every frame is
// counted.
func (r *Resolver) frame(st *batchState, pid uint32, f *frame.Frame) frame.Frame {
	key := rawFrameOf(pid, f)
	rf, ok := st.named[key]
	if !ok {
		switch {
		case f.Type.InKernel():
			rf = r.kernelFrame(st, *f)
		case f.Type.Interpreted():
			rf = resolvedFrame{r.interpretedFrame(pid, *f), notCounted}
		default:
			rf = r.userFrame(st, pid, *f)
		}
		st.named[key] = rf
	}
	if rf.outcome != notCounted {
		r.counts[rf.outcome].Add(1)
	}
	return rf.f
}

// resolveKernel names all kernel addresses of the batch in one call.
func (r *Resolver) resolveKernel(b *aggregate.Batch) map[uint64]kernelsym.Symbol {
	names := map[uint64]kernelsym.Symbol{}
	if r.kernel == nil {
		return names
	}
	var addrs []uint64
	for _, s := range b.Stacks {
		for _, f := range s.Frames {
			if !f.Type.InKernel() {
				continue
			}
			if _, ok := names[f.Address]; !ok {
				names[f.Address] = kernelsym.Symbol{}
				addrs = append(addrs, f.Address)
			}
		}
	}
	if len(addrs) == 0 {
		return names
	}
	resolved, err := r.kernel.Symbolize(addrs, make([]bool, len(addrs)))
	if err != nil {
		return names
	}
	for i, a := range addrs {
		names[a] = resolved[i]
	}
	return names
}

func (r *Resolver) kernelFrame(st *batchState, f frame.Frame) resolvedFrame {
	sym := st.kernel[f.Address]
	if !sym.OK {
		f.Mapping = st.kernelMapping("")
		return resolvedFrame{f, kernelUnnamed}
	}
	f.Mapping = st.kernelMapping(sym.Module)
	f.Lines = []frame.Line{{Name: sym.Name}}
	if sym.IsBPFProg {
		f.Type = frame.BPF
	}
	return resolvedFrame{f, kernelNamed}
}

// interpretedFrame names an interpreted frame. Like the OTel profiler's,
// it has no mapping and address 0: it runs no machine code of its own.
func (r *Resolver) interpretedFrame(pid uint32, f frame.Frame) frame.Frame {
	if r.interp != nil {
		f.Lines = r.interp.Name(pid, &f)
	}
	f.Address, f.Offset, f.Mapping = 0, 0, nil
	return f
}

// kernelMapping returns the batch's mapping of module ("" for the core
// kernel).
func (st *batchState) kernelMapping(module string) *frame.Mapping {
	m, ok := st.modules[module]
	if !ok {
		m = frame.KernelMapping(module)
		st.modules[module] = m
	}
	return m
}

func (r *Resolver) userFrame(st *batchState, pid uint32, f frame.Frame) resolvedFrame {
	am := f.Mapping // the aggregator's
	if am != nil && am.Path == symbolize.VDSOPath {
		return r.vdsoFrame(st, am, f)
	}
	if am != nil && !am.File() {
		// Anonymous executable memory: JIT code, named from the
		// runtime's perf map when it writes one. It keeps its address
		// (already the call's, for a return address).
		f.Mapping = r.mapping(st, am, nil)
		if name, ok := r.jit.Lookup(int(pid), f.Address); ok {
			f.Lines = []frame.Line{{Name: name}}
			return resolvedFrame{f, userNamed}
		}
		return resolvedFrame{f, userUnnamed}
	}
	if am == nil {
		return resolvedFrame{f, userUnmapped}
	}
	m := &am.Mapping
	bin := r.binary(st, int(pid), m)
	f.Mapping = r.mapping(st, am, bin)
	if bin == nil {
		return resolvedFrame{f, userUnreadable}
	}
	if bin.IsGo() {
		f.Type = frame.Go
	}
	key := nameKey{binary: bin.ID(), offset: m.FileOffset(f.Address), skip: symbolize.SkipPath(m.Path)}
	n, ok := r.names.Get(key)
	if !ok {
		var final bool
		if n, final = r.name(pid, m, bin, key); final {
			r.names.Add(key, n)
		}
	}
	if n.outcome != userUnmapped {
		f.VirtualAddress, f.Lines = n.vaddr, n.lines
	}
	return resolvedFrame{f, n.outcome}
}

// vdsoFrame names a frame in the kernel's vDSO from bpfcol's own copy of
// it, which a process's [vdso] of the same size is.
func (r *Resolver) vdsoFrame(st *batchState, am *frame.Mapping, f frame.Frame) resolvedFrame {
	bin, size, err := symbolize.VDSO()
	if err != nil || am.End-am.Start != size {
		f.Mapping = r.mapping(st, am, nil)
		return resolvedFrame{f, userUnnamed}
	}
	f.Mapping = r.mapping(st, am, bin)
	vaddr, ok := bin.Mapper().FileOffsetToVirtualAddress(am.FileOffset(f.Address))
	if !ok {
		return resolvedFrame{f, userUnmapped}
	}
	frames, ok := bin.Symbolize(vaddr)
	if !ok {
		return resolvedFrame{f, userUnnamed}
	}
	f.VirtualAddress, f.Lines = vaddr, frames
	return resolvedFrame{f, userNamed}
}

// name looks the address at key.offset of bin up, through the Symbolizer
// when there is one. final is false while debug info is on its way.
func (r *Resolver) name(pid uint32, m *process.Mapping, bin *symbolize.Binary, key nameKey) (n named, final bool) {
	if r.sym == nil {
		vaddr, ok := bin.Mapper().FileOffsetToVirtualAddress(key.offset)
		if !ok {
			return named{outcome: userUnmapped}, true
		}
		n = named{vaddr: vaddr, outcome: userUnnamed}
		if frames, ok := bin.Symbolize(vaddr); ok {
			n.lines, n.outcome = frames, userNamed
		}
		return n, true
	}
	// The offset is already the lookup address: never adjusted again.
	l := r.sym.Symbolize(symbolize.MappingRef{PID: int(pid), Path: m.Path, Key: m.Key()}, bin, key.offset)
	n = named{vaddr: l.VAddr, lines: l.Frames}
	switch {
	case l.Status == symbolize.Unmapped:
		n = named{outcome: userUnmapped}
	case len(n.lines) > 0:
		n.outcome = userNamed
	case l.Status == symbolize.Pending:
		n.outcome = userPending
	case l.Mode == symbolize.ModeSkip:
		n.outcome = userSkipped
	default:
		n.outcome = userUnnamed
	}
	return n, l.Status != symbolize.Pending
}

// binary opens each mapping's binary once per batch; nil when it cannot be
// opened.
func (r *Resolver) binary(st *batchState, pid int, m *process.Mapping) *symbolize.Binary {
	key := m.Key()
	if bin, ok := st.binaries[key]; ok {
		return bin
	}
	bin, err := r.binaries.Get(key, func() (*os.File, error) { return r.snapshots.Open(pid, m) })
	if err != nil {
		bin = nil
	}
	st.binaries[key] = bin
	return bin
}

// mapping returns the batch's copy of m, with the build ids of bin.
func (r *Resolver) mapping(st *batchState, m *frame.Mapping, bin *symbolize.Binary) *frame.Mapping {
	if pm, ok := st.mappings[m]; ok {
		return pm
	}
	pm := &frame.Mapping{Mapping: m.Mapping}
	if bin != nil {
		pm.BuildIDGNU, pm.BuildIDGo = bin.BuildIDGNU(), bin.BuildIDGo()
	}
	st.mappings[m] = pm
	return pm
}
