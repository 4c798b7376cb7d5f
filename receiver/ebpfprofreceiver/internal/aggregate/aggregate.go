// Package aggregate attributes stack samples to processes and their file
// mappings, puts back the caller that frame-pointer walking loses under a
// frameless function, and counts identical stacks over a report interval.
// It runs on its own goroutine, off the ringbuf-draining path.
package aggregate

import (
	"encoding/binary"
	"os"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize"
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
	Binaries *symbolize.BinaryCache
	// ProcessInfo reads a process's metadata; nil reads /proc.
	ProcessInfo func(pid int) (*Process, error)
}

// Process is what the profile says about one process.
type Process struct {
	PID         int
	ExePath     string
	ExeName     string
	ContainerID string
	// Mappings are the process's executable mappings.
	Mappings []process.Mapping

	held map[symbolize.FileKey]struct{} // binaries already opened into the cache
}

// Mapping returns the executable mapping holding addr, or nil.
func (p *Process) Mapping(addr uint64) *process.Mapping {
	for i := range p.Mappings {
		if p.Mappings[i].Contains(addr) {
			return &p.Mappings[i]
		}
	}
	return nil
}

// UserFrame is one user-space frame.
type UserFrame struct {
	// Addr is the address in the process.
	Addr uint64
	// Return is set for return addresses: the call is the instruction
	// before Addr.
	Return bool
	// Mapping is the executable mapping holding Addr, nil if none.
	Mapping *process.Mapping
}

// Stack is one distinct stack of one thread with its count.
type Stack struct {
	// Process is nil when the process could not be read.
	Process *Process
	PID     uint32
	TID     uint32
	Comm    string
	// Kernel holds kernel addresses, the interrupted PC first.
	Kernel []uint64
	// User holds user frames, the leaf first.
	User       []UserFrame
	Count      int64
	Timestamps []uint64
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
}

// Batch is everything aggregated over one interval.
type Batch struct {
	Start, End time.Time
	Stacks     []*Stack
	Stats      Stats
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
	clock      monotonicClock
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
	if cfg.ProcessInfo == nil {
		cfg.ProcessInfo = readProcess
	}
	a := &Aggregator{
		cfg:    cfg,
		stacks: map[string]*Stack{},
		procs:  newProcessTable(cfg.MaxProcesses, cfg.ProcessInfo),
		leaves: newLeafAnalyzer(cfg.Binaries),
		start:  time.Now(),
	}
	a.clock.refresh()
	return a
}

// Add attributes one sample and counts it.
func (a *Aggregator) Add(s *profiler.Sample) {
	a.stats.Samples++
	proc := a.procs.lookup(int(s.PID), s.UserIP)
	if proc == nil {
		a.stats.UnknownProcesses++
	}

	user := a.userFrames(proc, s)
	key := a.stackKey(s, user)
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
			Kernel:  append([]uint64(nil), s.Kernel...),
			User:    user,
		}
		a.stacks[string(key)] = st
		a.order = append(a.order, st)
	}
	st.Count++
	if a.timestamps < a.cfg.MaxTimestamps {
		st.Timestamps = append(st.Timestamps, a.clock.unixNanos(s.KtimeNs))
		a.timestamps++
	}
}

func (a *Aggregator) userFrames(proc *Process, s *profiler.Sample) []UserFrame {
	// Without the process's mappings no user frame can be checked (it
	// exited before it was read, or was exiting: its maps were empty):
	// none is emitted.
	if len(s.User) == 0 || proc == nil || !possibleFrame(proc, s.User[0]) {
		return nil
	}
	frames := make([]UserFrame, 0, len(s.User)+1)
	mappingOf := func(addr uint64) *process.Mapping {
		if proc == nil {
			return nil
		}
		return proc.Mapping(addr)
	}
	leaf := UserFrame{Addr: s.User[0], Mapping: mappingOf(s.User[0])}
	frames = append(frames, leaf)
	// A CFI walk found the leaf's caller exactly; only a frame pointer
	// can have lost it.
	if !s.CFI || s.LeafFramePointer {
		if caller, ok := a.leaves.lostCaller(proc, leaf, s); ok {
			frames = append(frames, UserFrame{Addr: caller, Return: true, Mapping: mappingOf(caller)})
			a.stats.CallersRecovered++
		}
	}
	for i, addr := range s.User[1:] {
		// A frame-pointer walk through code without frame pointers reads
		// garbage: an impossible address ends the stack.
		if !possibleFrame(proc, addr) {
			a.stats.TruncatedStacks++
			break
		}
		frames = append(frames, UserFrame{Addr: addr, Return: !s.IsPC(i + 1), Mapping: mappingOf(addr)})
	}
	a.holdBinaries(proc, frames)
	return frames
}

// maxUserAddr is the highest canonical user address on x86-64.
const maxUserAddr = 0x00007fffffffffff

// possibleFrame reports whether addr can be a user frame of proc: not zero,
// canonical, and in one of its executable mappings.
func possibleFrame(proc *Process, addr uint64) bool {
	return addr != 0 && addr <= maxUserAddr && proc.Mapping(addr) != nil
}

// stackKey serializes what makes two samples the same stack.
func (a *Aggregator) stackKey(s *profiler.Sample, user []UserFrame) []byte {
	k := a.key[:0]
	k = binary.LittleEndian.AppendUint32(k, s.PID)
	k = binary.LittleEndian.AppendUint32(k, s.TID)
	k = append(k, s.Comm...)
	k = append(k, 0)
	k = binary.LittleEndian.AppendUint32(k, uint32(len(s.Kernel)))
	for _, addr := range s.Kernel {
		k = binary.LittleEndian.AppendUint64(k, addr)
	}
	for _, f := range user {
		k = binary.LittleEndian.AppendUint64(k, f.Addr)
	}
	a.key = k
	return k
}

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
	a.clock.refresh()
	return b
}

// holdBinaries opens, once per process read, every binary a sample is in,
// so the binary is still there to symbolize after a short-lived process
// exits.
func (a *Aggregator) holdBinaries(proc *Process, frames []UserFrame) {
	if proc == nil || a.cfg.Binaries == nil {
		return
	}
	for _, f := range frames {
		m := f.Mapping
		if m == nil || !m.File() {
			continue
		}
		key := symbolize.FileKey{Dev: m.Dev, Ino: m.Inode}
		if _, ok := proc.held[key]; ok {
			continue
		}
		if proc.held == nil {
			proc.held = map[symbolize.FileKey]struct{}{}
		}
		proc.held[key] = struct{}{}
		bin, err := a.cfg.Binaries.Get(key, func() (*os.File, error) { return process.OpenMapping(proc.PID, m) })
		if err == nil {
			bin.Release()
		}
	}
}
