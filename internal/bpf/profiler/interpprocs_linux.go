//go:build linux && (amd64 || arm64)

package profiler

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
)

// The processes each runtime's walk may be given when Options leaves its
// bound at zero.
const (
	defaultPythonProcesses  = 1024
	defaultHotSpotProcesses = 256
	defaultV8Processes      = 1024
)

// errInterpProcsFull refuses a process beyond its runtime's bound.
var errInterpProcsFull = errors.New("as many processes of this runtime as its bound")

// interpProcs is user space's side of interp_procs, the one map of the
// processes that run an interpreter, which every sample looks up once.
// The runtimes share its room; each keeps the bound its option gives.
type interpProcs struct {
	mu    sync.Mutex
	kinds map[uint32]profilerInterpProcKind
	count map[profilerInterpProcKind]int
	max   map[profilerInterpProcKind]int
}

// configureInterpProcs sizes interp_procs for the three runtimes' bounds.
func configureInterpProcs(spec *ebpf.CollectionSpec, opts Options) *interpProcs {
	bound := func(n, def int) int {
		if n > 0 {
			return n
		}
		return def
	}
	p := &interpProcs{
		kinds: map[uint32]profilerInterpProcKind{},
		count: map[profilerInterpProcKind]int{},
		max: map[profilerInterpProcKind]int{
			profilerInterpProcKindINTERP_PROC_CPYTHON: bound(opts.PythonProcesses, defaultPythonProcesses),
			profilerInterpProcKindINTERP_PROC_HOTSPOT: bound(opts.HotSpotProcesses, defaultHotSpotProcesses),
			profilerInterpProcKindINTERP_PROC_V8:      bound(opts.V8Processes, defaultV8Processes),
		},
	}
	total := 0
	for _, n := range p.max {
		total += n
	}
	spec.Maps[profilerMapInterpProcs].MaxEntries = uint32(total)
	return p
}

// setInterpProc writes process pid's entry: kind, then the runtime's layout v (a
// generated struct), in the union that follows.
func setInterpProc[T any](s *Sampler, pid uint32, kind profilerInterpProcKind, v *T) error {
	var e profilerInterpProc
	body := unsafe.Slice((*byte)(unsafe.Pointer(&e.Py)), unsafe.Sizeof(e)-unsafe.Offsetof(e.Py))
	if int(unsafe.Sizeof(*v)) > len(body) {
		return fmt.Errorf("a layout of %d bytes in an entry of %d", unsafe.Sizeof(*v), len(body))
	}
	copy(body, unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v)))
	e.Kind = uint32(kind)

	p := s.interp
	p.mu.Lock()
	defer p.mu.Unlock()
	old, had := p.kinds[pid]
	if (!had || old != kind) && p.count[kind] >= p.max[kind] {
		return fmt.Errorf("%w (%d)", errInterpProcsFull, p.max[kind])
	}
	if err := s.objs.InterpProcs.Update(pid, &e, ebpf.UpdateAny); err != nil {
		return err
	}
	if had {
		p.count[old]--
	}
	p.kinds[pid] = kind
	p.count[kind]++
	return nil
}

// deleteInterpProc removes process pid's entry when it is of kind.
// Deleting an unknown process is not an error.
func (s *Sampler) deleteInterpProc(pid uint32, kind profilerInterpProcKind) error {
	p := s.interp
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, had := p.kinds[pid]; !had || old != kind {
		return nil
	}
	if err := s.objs.InterpProcs.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	delete(p.kinds, pid)
	p.count[kind]--
	return nil
}
