// Package resolve names the frames of an aggregated batch: user frames
// through the binaries' symbol tables, kernel frames through a kernel
// symbolizer. It runs after aggregation, on the export goroutine.
package resolve

import (
	"os"
	"time"

	"github.com/bpfcol/bpfcol/internal/perfmap"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/aggregate"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/profilebuilder"
)

// maxCachedLines bounds the cache of named user addresses kept across
// batches.
const maxCachedLines = 1 << 16

// Bounds on the perf maps read to name JIT frames: the processes held, and
// how often one file is read again for appended lines.
const (
	maxJITProcesses    = 256
	jitRefreshInterval = time.Second
)

// KernelAddr is one kernel address to name.
type KernelAddr struct {
	Addr uint64
	// Return is set for return addresses, which are looked up at Addr-1.
	Return bool
}

// KernelName is what a kernel address resolved to.
type KernelName struct {
	Name string
	// Module is "" for the core kernel.
	Module string
	// BPFProgram is set for JIT-compiled BPF programs.
	BPFProgram bool
	OK         bool
}

// KernelSymbolizer names kernel addresses in one batch.
type KernelSymbolizer interface {
	SymbolizeKernel(addrs []KernelAddr) ([]KernelName, error)
}

// Stats counts the outcomes of one Resolve.
type Stats struct {
	// UserFrames and KernelFrames count the frames resolved.
	UserFrames, KernelFrames int64
	// UnnamedUserFrames counts user frames left without a name; they keep
	// their address and mapping.
	UnnamedUserFrames int64
	// UnmappedUserFrames counts user frames outside any file mapping.
	UnmappedUserFrames int64
	// UnnamedKernelFrames counts kernel frames left without a name.
	UnnamedKernelFrames int64
	// BinaryOpenErrors counts mappings whose binary could not be opened.
	BinaryOpenErrors int64
	// PendingUserFrames counts user frames whose debug info is being
	// fetched; they go out with their build-id and address.
	PendingUserFrames int64
	// SkippedUserFrames counts user frames in mappings classified skip.
	SkippedUserFrames int64
}

type lineKey struct {
	file symbolize.FileKey
	addr uint64
}

// Resolver names frames. It is not safe for concurrent use.
type Resolver struct {
	binaries *symbolize.BinaryCache
	// sym adds DWARF, debug files and debuginfod; nil names frames from
	// the mapped binary alone.
	sym    *symbolize.Symbolizer
	kernel KernelSymbolizer
	lines  map[lineKey][]profilebuilder.Line
	// symbolized caches the Symbolizer's final answers by file offset.
	symbolized map[lineKey]symbolizedLines
	// kernelMapping is the one mapping every kernel frame points at.
	kernelMapping *profilebuilder.Mapping
	// jit names frames in anonymous executable memory.
	jit *perfmap.Cache
}

// Option configures a Resolver.
type Option func(*Resolver)

// WithSymbolizer names user frames through s: per-mapping classification,
// separate debug files and debuginfod. The caller keeps ownership of s.
func WithSymbolizer(s *symbolize.Symbolizer) Option {
	return func(r *Resolver) { r.sym = s }
}

// New returns a Resolver. kernel may be nil: kernel frames then keep only
// their addresses.
func New(binaries *symbolize.BinaryCache, kernel KernelSymbolizer, opts ...Option) *Resolver {
	r := &Resolver{
		binaries:      binaries,
		kernel:        kernel,
		lines:         map[lineKey][]profilebuilder.Line{},
		symbolized:    map[lineKey]symbolizedLines{},
		kernelMapping: &profilebuilder.Mapping{Path: "[kernel.kallsyms]"},
		jit:           perfmap.New(maxJITProcesses, jitRefreshInterval),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// batchState holds what one Resolve opened, released at its end.
type batchState struct {
	binaries map[symbolize.FileKey]*symbolize.Binary
	mappings map[*process.Mapping]*profilebuilder.Mapping
	kernel   map[KernelAddr]KernelName
}

// Resolve names every frame of b and groups the stacks by process.
func (r *Resolver) Resolve(b *aggregate.Batch) ([]profilebuilder.Process, Stats) {
	var stats Stats
	st := &batchState{
		binaries: map[symbolize.FileKey]*symbolize.Binary{},
		mappings: map[*process.Mapping]*profilebuilder.Mapping{},
	}
	defer func() {
		for _, bin := range st.binaries {
			if bin != nil {
				bin.Release()
			}
		}
	}()
	st.kernel = r.resolveKernel(b, &stats)

	byPID := map[uint32]int{}
	var procs []profilebuilder.Process
	for _, s := range b.Stacks {
		idx, ok := byPID[s.PID]
		if !ok {
			idx = len(procs)
			byPID[s.PID] = idx
			p := profilebuilder.Process{PID: int64(s.PID)}
			if s.Process != nil {
				p.ExePath, p.ExeName, p.ContainerID = s.Process.ExePath, s.Process.ExeName, s.Process.ContainerID
			}
			procs = append(procs, p)
		}
		frames := make([]profilebuilder.Frame, 0, len(s.Kernel)+len(s.User))
		for i, addr := range s.Kernel {
			frames = append(frames, r.kernelFrame(st, KernelAddr{Addr: addr, Return: i > 0}))
		}
		for _, f := range s.User {
			frames = append(frames, r.userFrame(st, s.PID, f, &stats))
		}
		stats.KernelFrames += int64(len(s.Kernel))
		stats.UserFrames += int64(len(s.User))
		procs[idx].Samples = append(procs[idx].Samples, profilebuilder.Sample{
			Frames:     frames,
			Count:      s.Count,
			Timestamps: s.Timestamps,
			ThreadID:   int64(s.TID),
			ThreadName: s.Comm,
		})
	}
	return procs, stats
}

// resolveKernel names all kernel addresses of the batch in one call.
func (r *Resolver) resolveKernel(b *aggregate.Batch, stats *Stats) map[KernelAddr]KernelName {
	names := map[KernelAddr]KernelName{}
	if r.kernel == nil {
		return names
	}
	var addrs []KernelAddr
	for _, s := range b.Stacks {
		for i, addr := range s.Kernel {
			k := KernelAddr{Addr: addr, Return: i > 0}
			if _, ok := names[k]; !ok {
				names[k] = KernelName{}
				addrs = append(addrs, k)
			}
		}
	}
	if len(addrs) == 0 {
		return names
	}
	resolved, err := r.kernel.SymbolizeKernel(addrs)
	if err != nil {
		stats.UnnamedKernelFrames += int64(len(addrs))
		return names
	}
	for i, k := range addrs {
		names[k] = resolved[i]
	}
	return names
}

func (r *Resolver) kernelFrame(st *batchState, k KernelAddr) profilebuilder.Frame {
	addr := k.Addr
	if k.Return {
		addr--
	}
	f := profilebuilder.Frame{Address: addr, Type: profilebuilder.FrameKernel, Mapping: r.kernelMapping}
	if n := st.kernel[k]; n.OK {
		f.Lines = []profilebuilder.Line{{Function: n.Name, File: n.Module}}
		if n.BPFProgram {
			f.Type = profilebuilder.FrameBPF
		}
	}
	return f
}

func (r *Resolver) userFrame(st *batchState, pid uint32, f aggregate.UserFrame, stats *Stats) profilebuilder.Frame {
	out := profilebuilder.Frame{Address: f.Addr, Type: profilebuilder.FrameNative}
	m := f.Mapping
	if m != nil && !m.File() {
		// Anonymous executable memory: JIT code, named from the
		// runtime's perf map when it writes one. It keeps its address.
		out.Mapping = r.mapping(st, m, nil)
		addr := f.Addr
		if f.Return {
			addr--
		}
		if name, ok := r.jit.Lookup(int(pid), addr); ok {
			out.Lines = []profilebuilder.Line{{Function: name}}
			return out
		}
		stats.UnnamedUserFrames++
		return out
	}
	if m == nil {
		stats.UnmappedUserFrames++
		stats.UnnamedUserFrames++
		return out
	}
	bin := r.binary(st, int(pid), m, stats)
	if bin == nil {
		stats.UnnamedUserFrames++
		out.Mapping = r.mapping(st, m, nil)
		return out
	}
	out.Mapping = r.mapping(st, m, bin)
	if bin.IsGo() {
		out.Type = profilebuilder.FrameGo
	}
	if r.sym != nil {
		return r.symbolizedFrame(out, pid, m, bin, f, stats)
	}
	vaddr, ok := bin.Mapper().FileOffsetToVirtualAddress(m.FileOffset(f.Addr))
	if !ok {
		stats.UnnamedUserFrames++
		return out
	}
	if f.Return {
		vaddr-- // name the call instruction, not the one after it
	}
	out.Address = vaddr
	out.Lines = r.linesAt(bin, symbolize.FileKey{Dev: m.Dev, Ino: m.Inode}, vaddr)
	if len(out.Lines) == 0 {
		stats.UnnamedUserFrames++
	}
	return out
}

// symbolizedFrame names f through the Symbolizer. Only final answers are
// cached: a frame whose debug info is on its way is asked again next batch.
func (r *Resolver) symbolizedFrame(out profilebuilder.Frame, pid uint32, m *process.Mapping, bin *symbolize.Binary, f aggregate.UserFrame, stats *Stats) profilebuilder.Frame {
	fileKey := symbolize.FileKey{Dev: m.Dev, Ino: m.Inode}
	key := lineKey{fileKey, m.FileOffset(f.Addr)<<1 | boolBit(f.Return)}
	if c, ok := r.symbolized[key]; ok {
		out.Address, out.Lines = c.vaddr, c.lines
		if len(out.Lines) == 0 {
			stats.UnnamedUserFrames++
		}
		return out
	}
	l := r.sym.Symbolize(symbolize.MappingRef{PID: int(pid), Path: m.Path, Key: fileKey}, bin, m.FileOffset(f.Addr), f.Return)
	switch l.Status {
	case symbolize.Unmapped:
		stats.UnnamedUserFrames++
		return out
	case symbolize.Pending:
		stats.PendingUserFrames++
	}
	if l.Mode == symbolize.ModeSkip {
		stats.SkippedUserFrames++
	}
	out.Address = l.VAddr
	if len(l.Frames) > 0 {
		out.Lines = make([]profilebuilder.Line, len(l.Frames))
		for i, fr := range l.Frames {
			out.Lines[i] = profilebuilder.Line{Function: fr.Function, File: fr.File, Line: fr.Line}
		}
	} else {
		stats.UnnamedUserFrames++
	}
	if l.Status != symbolize.Pending {
		if len(r.symbolized) >= maxCachedLines {
			clear(r.symbolized)
		}
		r.symbolized[key] = symbolizedLines{vaddr: l.VAddr, lines: out.Lines}
	}
	return out
}

type symbolizedLines struct {
	vaddr uint64
	lines []profilebuilder.Line
}

func boolBit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func (r *Resolver) linesAt(bin *symbolize.Binary, file symbolize.FileKey, vaddr uint64) []profilebuilder.Line {
	key := lineKey{file, vaddr}
	if lines, ok := r.lines[key]; ok {
		return lines
	}
	var lines []profilebuilder.Line
	if frames, ok := bin.Symbolize(vaddr); ok {
		lines = make([]profilebuilder.Line, len(frames))
		for i, fr := range frames {
			lines[i] = profilebuilder.Line{Function: fr.Function, File: fr.File, Line: fr.Line}
		}
	}
	if len(r.lines) >= maxCachedLines {
		clear(r.lines)
	}
	r.lines[key] = lines
	return lines
}

// binary opens each mapping's binary once per batch.
func (r *Resolver) binary(st *batchState, pid int, m *process.Mapping, stats *Stats) *symbolize.Binary {
	key := symbolize.FileKey{Dev: m.Dev, Ino: m.Inode}
	if bin, ok := st.binaries[key]; ok {
		return bin
	}
	bin, err := r.binaries.Get(key, func() (*os.File, error) { return process.OpenMapping(pid, m) })
	if err != nil {
		stats.BinaryOpenErrors++
		bin = nil
	}
	st.binaries[key] = bin
	return bin
}

func (r *Resolver) mapping(st *batchState, m *process.Mapping, bin *symbolize.Binary) *profilebuilder.Mapping {
	if pm, ok := st.mappings[m]; ok {
		return pm
	}
	pm := &profilebuilder.Mapping{Path: m.Path, Start: m.Start, Limit: m.End, Offset: m.Offset}
	if bin != nil {
		pm.BuildIDGNU, pm.BuildIDGo = bin.BuildIDGNU(), bin.BuildIDGo()
	}
	st.mappings[m] = pm
	return pm
}
