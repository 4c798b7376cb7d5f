package aggregate

import (
	"os"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/unwind"
)

// maxAnalyzedFunctionBytes bounds the heap of the cache of analysed
// functions (their code and answers), least recently used out first.
const maxAnalyzedFunctionBytes = 2 << 20

// analyzedEntryCost is what an entry of the function cache holds beside
// the function: its key and the LRU's element and map slot.
const analyzedEntryCost = 128

func analyzedCost(_ functionKey, fn *unwind.Function) int64 {
	if fn == nil {
		return analyzedEntryCost
	}
	return analyzedEntryCost + fn.Size()
}

// maxSlotPCs bounds the cache of answers per sampled PC, least recently
// used out first.
const maxSlotPCs = 1 << 12

// leafMaxIdle is how long an analysed function, or a PC's answer, stays
// cached unused: processes that come and go leave theirs behind (a PC is
// keyed by file, and each copy of a binary is a new file), and the caches
// would fill toward their bounds for as long as new ones come.
const leafMaxIdle = lru.ChurnIdle

// functionKey is a function of a binary. The binary is named by its
// Binary's ID: copies of one build, which Binaries shares, share their
// analyses too. The code analysed is the shared Binary's, so a file
// faking another's build id could only mislead the choice between SP and
// SP+8, which lostCaller still checks against the process's own mappings:
// a wrong frame at worst, as a wrong name would be.
type functionKey struct {
	binary uint64
	start  uint64
}

// pcKey is a sampled PC: its file and file offset.
type pcKey struct {
	file   process.FileKey
	offset uint64
}

// noSlot marks a PC whose return address is not at SP or SP+8, or whose
// function could not be analysed.
const noSlot = -1

// leafAnalyzer finds the caller that frame-pointer walking skipped when the
// sampled function had not pushed a frame: the return address is then at
// SP (or SP+8), which the sampler captured.
type leafAnalyzer struct {
	binaries  Binaries
	functions *lru.Cache[functionKey, *unwind.Function] // nil value: not analysable
	// slots remembers the answer for each PC: a busy thread is sampled at
	// the same few PCs, and each answer otherwise costs a symbol lookup
	// in its binary.
	slots *lru.Cache[pcKey, int8]
}

func newLeafAnalyzer(binaries Binaries) *leafAnalyzer {
	l := &leafAnalyzer{
		binaries:  binaries,
		functions: lru.New(maxAnalyzedFunctionBytes, analyzedCost),
		slots:     lru.New[pcKey, int8](maxSlotPCs, nil),
	}
	l.functions.SetMaxIdle(leafMaxIdle)
	l.slots.SetMaxIdle(leafMaxIdle)
	return l
}

// lostCaller returns the return address into the leaf's caller when the
// frame-pointer stack in s does not already hold it.
func (l *leafAnalyzer) lostCaller(proc *Process, leaf frame.Frame, s *profiler.Sample) (uint64, bool) {
	if l.binaries == nil || proc == nil || leaf.Mapping == nil || !leaf.Mapping.File() || !s.LeafWordsValid {
		return 0, false
	}
	// Most leaves pushed a frame, or the words at SP are no return
	// address the walk lacks: then no answer of the analysis could
	// recover a caller, and the binary is not opened nor decoded.
	if !l.candidate(proc, s, 0) && !l.candidate(proc, s, 8) {
		return 0, false
	}
	slot, ok := l.slot(proc.PID, &leaf.Mapping.Mapping, leaf.Address)
	if !ok || !l.candidate(proc, s, slot) {
		return 0, false
	}
	return s.LeafWords[slot/8], true
}

// candidate reports whether the word at SP+slot could be the lost caller:
// a real return address follows a call in executable code of the process
// (possibleFrame), and is not already the next frame of the walk.
func (l *leafAnalyzer) candidate(proc *Process, s *profiler.Sample, slot int) bool {
	ret := s.LeafWords[slot/8]
	return possibleFrame(proc, frame.AtReturnAddress(frame.Native, ret)) && (len(s.User) <= 1 || s.User[1] != ret)
}

func (l *leafAnalyzer) slot(pid int, m *process.Mapping, addr uint64) (int, bool) {
	key := pcKey{m.Key(), m.FileOffset(addr)}
	if slot, ok := l.slots.Get(key); ok {
		return int(slot), slot != noSlot
	}
	slot, ok, opened := l.analyzeSlot(pid, m, addr)
	if !ok {
		slot = noSlot
	}
	// A binary that could not be opened is tried again next time.
	if opened {
		l.slots.Add(key, int8(slot))
	}
	return slot, ok
}

// analyzeSlot finds where the return address is at the PC addr of m;
// opened says whether m's binary could be read for the answer.
func (l *leafAnalyzer) analyzeSlot(pid int, m *process.Mapping, addr uint64) (slot int, ok, opened bool) {
	bin, err := l.binaries.Open(m.Key(), func() (*os.File, error) { return process.OpenMapping(pid, m) })
	if err != nil {
		return 0, false, false
	}
	defer bin.Release()
	pc, start, end, ok := bin.FunctionAt(m.FileOffset(addr))
	if !ok {
		return 0, false, true
	}
	// Each function is decoded once; its answer for every PC is kept.
	key := functionKey{bin.ID(), start}
	fn, seen := l.functions.Get(key)
	if !seen {
		fn = analyze(bin, start, end)
		l.functions.Add(key, fn)
	}
	if fn == nil {
		return 0, false, true
	}
	slot, ok = fn.ReturnAddressSlot(pc)
	return slot, ok && (slot == 0 || slot == 8), true
}

func analyze(bin Binary, start, end uint64) *unwind.Function {
	if end <= start || end-start > unwind.MaxCodeSize {
		return nil
	}
	code, err := bin.ReadCode(start, int(end-start))
	if err != nil {
		return nil
	}
	return unwind.Analyze(code, start)
}
