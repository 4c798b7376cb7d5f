package aggregate

import (
	"os"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/unwind"
)

// maxLeafDecisions bounds the cache of per-PC decisions.
const maxLeafDecisions = 1 << 16

type leafKey struct {
	file symbolize.FileKey
	pc   uint64
}

type leafDecision struct {
	slot int
	ok   bool
}

// leafAnalyzer finds the caller that frame-pointer walking skipped when the
// sampled function had not pushed a frame: the return address is then at
// SP (or SP+8), which the sampler captured.
type leafAnalyzer struct {
	binaries  *symbolize.BinaryCache
	decisions map[leafKey]leafDecision
}

func newLeafAnalyzer(binaries *symbolize.BinaryCache) *leafAnalyzer {
	return &leafAnalyzer{binaries: binaries, decisions: map[leafKey]leafDecision{}}
}

// lostCaller returns the return address into the leaf's caller when the
// frame-pointer stack in s does not already hold it.
func (l *leafAnalyzer) lostCaller(proc *Process, leaf UserFrame, s *profiler.Sample) (uint64, bool) {
	m := leaf.Mapping
	if l.binaries == nil || proc == nil || m == nil || !m.File() || !s.SPWordsValid {
		return 0, false
	}
	slot, ok := l.slot(proc.PID, m, leaf.Addr)
	if !ok {
		return 0, false
	}
	ret := s.SPWords[slot/8]
	// A real return address points into executable code of the process,
	// and is not already the next frame of the walk.
	if proc.Mapping(ret) == nil || (len(s.User) > 1 && s.User[1] == ret) {
		return 0, false
	}
	return ret, true
}

func (l *leafAnalyzer) slot(pid int, m *process.Mapping, addr uint64) (int, bool) {
	file := symbolize.FileKey{Dev: m.Dev, Ino: m.Inode}
	bin, err := l.binaries.Get(file, func() (*os.File, error) { return process.OpenMapping(pid, m) })
	if err != nil {
		return 0, false
	}
	defer bin.Release()
	pc, ok := bin.Mapper().FileOffsetToVirtualAddress(m.FileOffset(addr))
	if !ok {
		return 0, false
	}
	key := leafKey{file, pc}
	if d, ok := l.decisions[key]; ok {
		return d.slot, d.ok
	}
	d := analyze(bin, pc)
	if len(l.decisions) >= maxLeafDecisions {
		clear(l.decisions)
	}
	l.decisions[key] = d
	return d.slot, d.ok
}

func analyze(bin *symbolize.Binary, pc uint64) leafDecision {
	start, end, ok := bin.FunctionStart(pc)
	if !ok || end <= start || end-start > unwind.MaxCodeSize {
		return leafDecision{}
	}
	code, err := bin.ReadCode(start, int(end-start))
	if err != nil {
		return leafDecision{}
	}
	slot, ok := unwind.ReturnAddressSlot(code, start, pc)
	return leafDecision{slot: slot, ok: ok && (slot == 0 || slot == 8)}
}
