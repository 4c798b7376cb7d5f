package unwind

import (
	"runtime"
	"slices"
	"sort"
	"unsafe"

	"golang.org/x/arch/x86/x86asm"
)

// MaxCodeSize bounds the bytes analysed per function; larger functions are
// not analysed (every PC answers ok=false) to bound time and memory.
const MaxCodeSize = 1 << 20

// ReturnAddressSlot decodes the function's code from its start up to pc and
// reports where the return address sits relative to SP when the frame-pointer
// chain does not cover the caller; on arm64 (the collector's own
// architecture) slot 0 is the link register. code holds the function's bytes starting at
// funcStart, ideally the whole function: later code can jump back before pc.
// ok=false means: the function has set up its frame (push rbp; mov rbp,rsp) at
// pc so the FP walk is already right, or the answer is not provable.
//
// funcStart must be an entry reached by call (a symbol or an FDE whose first
// CFA rule is rsp+8), not a fragment entered by jmp such as gcc's "foo.cold".
//
// Callers that query many PCs of one function should use Analyze once and
// query the result.
func ReturnAddressSlot(code []byte, funcStart, pc uint64) (spOffset int, ok bool) {
	return Analyze(code, funcStart).ReturnAddressSlot(pc)
}

// Function is the result of analysing one function's code: the return
// address slot of every instruction reachable from its entry.
type Function struct {
	start uint64
	code  []byte
	arm64 bool // arm64 code: slot 0 is the link register
	// offsets is sorted; slots[i] is the answer at start+offsets[i]:
	// 0 or 8, or -1 for "no provable slot".
	offsets []uint32
	slots   []int8
}

// Analyze decodes the function at funcStart (code holds its bytes) and records
// the return address slot at every instruction reachable from the entry along
// direct control flow. The result keeps a reference to code, which must not
// change afterwards.
func Analyze(code []byte, funcStart uint64) *Function {
	if runtime.GOARCH == "arm64" {
		return analyzeARM64(code, funcStart)
	}
	f := &Function{start: funcStart, code: code}
	if len(code) > MaxCodeSize {
		return f
	}
	states, switches := explore(code)
	if switches {
		// Stack-switching code (longjmp, setcontext, Go's gogo): the
		// caller the FP walk lost is not a frame worth inventing.
		return f
	}
	f.offsets, f.slots = answers(states)
	return f
}

// answers returns the analysed offsets, sorted, and the slot each
// answers, from an analysis's states.
func answers[S interface{ slot() int8 }](states map[uint32]S) ([]uint32, []int8) {
	offsets := make([]uint32, 0, len(states))
	for off := range states {
		offsets = append(offsets, off)
	}
	slices.Sort(offsets)
	slots := make([]int8, len(offsets))
	for i, off := range offsets {
		slots[i] = states[off].slot()
	}
	return offsets, slots
}

// Size returns the bytes of heap f holds: itself, its code and its
// answers.
func (f *Function) Size() int64 {
	return int64(unsafe.Sizeof(*f)) + int64(cap(f.code)) + int64(cap(f.offsets))*4 + int64(cap(f.slots))
}

// ReturnAddressSlot reports where the return address into the caller is,
// relative to SP, at pc. See the package-level ReturnAddressSlot.
func (f *Function) ReturnAddressSlot(pc uint64) (spOffset int, ok bool) {
	if pc < f.start || pc-f.start >= uint64(len(f.code)) || len(f.code) > MaxCodeSize {
		return 0, false
	}
	off := pc - f.start
	// Whatever path led here, a ret pops the return address from [SP]
	// (arm64: takes it from x30); this also covers returns only
	// reachable through jump tables.
	if f.arm64 {
		if isRetARM64(f.code, int(off)) {
			return 0, true
		}
	} else if inst, ok := decodeAt(f.code, int(off)); ok && inst.Op == x86asm.RET {
		return 0, true
	}
	i := sort.Search(len(f.offsets), func(i int) bool { return uint64(f.offsets[i]) >= off })
	if i == len(f.offsets) || uint64(f.offsets[i]) != off || f.slots[i] < 0 {
		return 0, false
	}
	return int(f.slots[i]), true
}

// rbpState says what RBP holds relative to this function's frame.
type rbpState uint8

const (
	// rbpCaller: RBP is not derived from this function's stack pointer
	// (the caller's frame pointer, or plain data). The FP walk skips the
	// caller, so the return address slot is needed.
	rbpCaller rbpState = iota
	// rbpFrame: RBP was set from RSP (mov rbp, rsp); the FP walk covers
	// the caller.
	rbpFrame
	// rbpUnknown: anything else; no answer is given.
	rbpUnknown
)

// state is the abstract machine state before an instruction. depth counts the
// bytes pushed since entry, so the return address is at [SP+depth].
type state struct {
	depth      int32
	frameDepth int32 // depth at "mov rbp, rsp" when rbp == rbpFrame
	// savedRBPDepth is the depth right after the latest "push rbp", whose
	// slot holds an RBP in state savedRBP; -1 when none is tracked.
	savedRBPDepth int32
	savedRBP      rbpState
	rbp           rbpState
	depthKnown    bool
	frameKnown    bool // frameDepth is valid
	// conflict: reached with disagreeing states; answers nothing.
	conflict bool
	// tentative: reached only through the fall-through of some call,
	// which may not return (see explore).
	tentative bool
}

// conflicted returns the state of an instruction reached with disagreeing
// states; it answers nothing.
func conflicted(tentative bool) state {
	return state{rbp: rbpUnknown, savedRBPDepth: -1, savedRBP: rbpUnknown, conflict: true, tentative: tentative}
}

func (s state) slot() int8 {
	if s.conflict || !s.depthKnown || s.rbp != rbpCaller {
		return -1
	}
	switch s.depth {
	case 0, 8:
		return int8(s.depth)
	}
	return -1
}

// explore runs a worklist dataflow over direct control flow from offset 0 and
// returns the state at every reached instruction. Compilers emit CFI that is a
// function of the PC alone, so in compiled code every path to an instruction
// carries the same stack depth; a disagreement means the model is wrong there
// and the instruction (and what follows) gets no answer.
//
// The one edge that may not exist is the fall-through after a call: the
// callee may never return (panic, abort, throw), and the next bytes then
// belong to another block, such as Go's morestack tail. States that depend on
// such an edge are tentative: a state derived without one (firm) replaces
// them, and they never override a firm state. Per instruction the state only
// rises (unreached, tentative, tentative conflict, firm, firm conflict), so
// the loop terminates.
//
// switches reports that reachable code loads RSP from somewhere other than
// RSP or RBP, i.e. switches stacks.
func explore(code []byte) (states map[uint32]state, switches bool) {
	states = map[uint32]state{0: {depthKnown: true, savedRBPDepth: -1}}
	work := []uint32{0}
	type edge struct {
		to uint32
		s  state
	}
	var afterCall []edge // followed once firm edges run out, oldest first
	join := func(off uint32, in state) {
		old, seen := states[off]
		switch {
		case !seen, old.tentative && !in.tentative:
			states[off] = in
		case in.tentative && !old.tentative, old.conflict, old == in:
			return
		default:
			states[off] = conflicted(in.tentative)
		}
		work = append(work, off)
	}
	for len(work) > 0 || len(afterCall) > 0 {
		if len(work) == 0 {
			e := afterCall[0]
			afterCall = afterCall[1:]
			join(e.to, e.s)
			continue
		}
		off := work[len(work)-1]
		work = work[:len(work)-1]
		inst, ok := decodeAt(code, int(off))
		if !ok {
			// Unknown bytes: later instruction boundaries are unknown too.
			continue
		}
		switches = switches || switchesStack(inst)
		next := off + uint32(inst.Len)
		out, flow := step(states[off], inst, next)
		if flow.fallThrough && int(next) < len(code) {
			if inst.Op == x86asm.CALL {
				out.tentative = true
				afterCall = append(afterCall, edge{next, out})
			} else {
				join(next, out)
			}
		}
		if flow.hasTarget && int(flow.target) < len(code) {
			join(flow.target, out)
		}
	}
	return states, switches
}

// switchesStack reports whether inst sets RSP to a value not derived from RSP
// or RBP.
func switchesStack(inst x86asm.Inst) bool {
	dst, _ := inst.Args[0].(x86asm.Reg)
	src := inst.Args[1]
	if inst.Op == x86asm.XCHG {
		if r, _ := src.(x86asm.Reg); writesStackPointer(r) {
			return true
		}
	}
	if !writesStackPointer(dst) {
		return false
	}
	switch inst.Op {
	case x86asm.MOV, x86asm.XCHG, x86asm.POP, x86asm.CMOVA, x86asm.CMOVAE, x86asm.CMOVB,
		x86asm.CMOVBE, x86asm.CMOVE, x86asm.CMOVG, x86asm.CMOVGE, x86asm.CMOVL, x86asm.CMOVLE,
		x86asm.CMOVNE, x86asm.CMOVNO, x86asm.CMOVNP, x86asm.CMOVNS, x86asm.CMOVO, x86asm.CMOVP, x86asm.CMOVS:
		return src != x86asm.RBP
	case x86asm.LEA:
		m, _ := src.(x86asm.Mem)
		return m.Base != x86asm.RSP && m.Base != x86asm.RBP
	}
	return false
}

type flow struct {
	fallThrough bool
	hasTarget   bool
	target      uint32
}

// endbr64 and endbr32 are decoded by hand: x86asm reads them as a stray
// prefix followed by another instruction.
var endbr = [][]byte{{0xf3, 0x0f, 0x1e, 0xfa}, {0xf3, 0x0f, 0x1e, 0xfb}}

func decodeAt(code []byte, off int) (x86asm.Inst, bool) {
	if off < 0 || off >= len(code) {
		return x86asm.Inst{}, false
	}
	rest := code[off:]
	for _, e := range endbr {
		if len(rest) >= len(e) && string(rest[:len(e)]) == string(e) {
			return x86asm.Inst{Op: x86asm.NOP, Len: len(e), Mode: 64}, true
		}
	}
	inst, err := x86asm.Decode(rest, 64)
	if err != nil || inst.Op == 0 || inst.Len == 0 {
		return x86asm.Inst{}, false
	}
	return inst, true
}

// step applies one instruction to s. next is the offset of the following
// instruction, used for relative branch targets.
func step(s state, inst x86asm.Inst, next uint32) (state, flow) {
	fl := flow{fallThrough: true}
	if s.conflict {
		// Still follow control flow so that everything after a conflict
		// is marked too, but compute nothing.
		return s, controlFlow(inst, next, fl)
	}
	dst, _ := inst.Args[0].(x86asm.Reg)
	switch inst.Op {
	case x86asm.NOP, x86asm.CMP, x86asm.TEST, x86asm.BT:
		// No register writes.
	case x86asm.PUSH, x86asm.PUSHFQ, x86asm.PUSHF:
		s.adjust(stackOperandSize(inst))
		if dst == x86asm.RBP {
			s.savedRBPDepth, s.savedRBP = s.depth, s.rbp
			if !s.depthKnown {
				s.savedRBPDepth = -1
			}
		}
	case x86asm.POP, x86asm.POPFQ, x86asm.POPF:
		size := stackOperandSize(inst)
		switch {
		case writesStackPointer(dst):
			s.depthKnown = false
		case dst == x86asm.RBP:
			s.popRBP()
		case isFramePointer(dst):
			s.rbp = rbpUnknown
			s.adjust(-size)
		default:
			s.adjust(-size)
		}
	case x86asm.LEAVE:
		if s.rbp == rbpFrame && s.frameKnown {
			s.depth, s.depthKnown = s.frameDepth, true
			s.popRBP()
		} else {
			s.depthKnown = false
			s.rbp = rbpUnknown
		}
	case x86asm.CALL:
		// A call returns with the depth it started with, except a call to
		// the next instruction, which only pushes (PIC thunk idiom).
		if rel, ok := inst.Args[0].(x86asm.Rel); ok && rel == 0 {
			s.adjust(8)
		}
	default:
		s.generic(inst, dst)
	}
	return s, controlFlow(inst, next, fl)
}

// stackOperandSize is the bytes a push or pop moves: 8 in 64-bit mode, 2
// with an operand-size prefix. (x86asm reports DataSize 32 for the
// unprefixed forms, which is not what the CPU does.)
func stackOperandSize(inst x86asm.Inst) int32 {
	if inst.DataSize == 16 {
		return 2
	}
	return 8
}

// adjust records delta more bytes on the stack (negative: fewer).
func (s *state) adjust(delta int32) {
	if !s.depthKnown {
		return
	}
	s.depth += delta
	if s.depth < s.savedRBPDepth {
		// The saved RBP slot was released.
		s.savedRBPDepth = -1
	}
}

func (s *state) popRBP() {
	if s.depthKnown && s.depth == s.savedRBPDepth {
		s.rbp = s.savedRBP
	} else {
		s.rbp = rbpUnknown
	}
	s.adjust(-8)
	if s.rbp != rbpFrame {
		s.frameKnown = false
	}
}

// generic handles instructions other than pushes, pops and calls: only writes
// to RSP and RBP matter.
func (s *state) generic(inst x86asm.Inst, dst x86asm.Reg) {
	src := inst.Args[1]
	switch {
	case dst == x86asm.RSP:
		s.writeRSP(inst, src)
	case dst == x86asm.RBP && inst.Op == x86asm.MOV && src == x86asm.RSP:
		s.rbp = rbpFrame
		s.frameDepth, s.frameKnown = s.depth, s.depthKnown
	case writesStackPointer(dst):
		s.depthKnown = false
	case isFramePointer(dst):
		s.rbp = rbpUnknown
	}
	// Instructions that write their second operand as well.
	switch inst.Op {
	case x86asm.XCHG, x86asm.XADD:
		r, _ := src.(x86asm.Reg)
		if writesStackPointer(r) {
			s.depthKnown = false
		}
		if isFramePointer(r) {
			s.rbp = rbpUnknown
		}
	case x86asm.ENTER:
		s.depthKnown = false
		s.rbp = rbpUnknown
	}
}

func (s *state) writeRSP(inst x86asm.Inst, src x86asm.Arg) {
	imm, isImm := src.(x86asm.Imm)
	mem, isMem := src.(x86asm.Mem)
	switch {
	case inst.Op == x86asm.SUB && isImm:
		s.adjust(int32(imm))
	case inst.Op == x86asm.ADD && isImm:
		s.adjust(-int32(imm))
	case inst.Op == x86asm.LEA && isMem && mem.Index == 0 && mem.Segment == 0 && mem.Base == x86asm.RSP:
		s.adjust(-int32(mem.Disp))
	case inst.Op == x86asm.LEA && isMem && mem.Index == 0 && mem.Segment == 0 && mem.Base == x86asm.RBP:
		s.fromFrame(-int32(mem.Disp))
	case inst.Op == x86asm.MOV && src == x86asm.RBP:
		s.fromFrame(0)
	default:
		s.depthKnown = false
	}
}

// fromFrame sets RSP to RBP+(-delta) when RBP is this function's frame.
func (s *state) fromFrame(delta int32) {
	if s.rbp == rbpFrame && s.frameKnown {
		s.depth, s.depthKnown = s.frameDepth+delta, true
		if s.depth < s.savedRBPDepth {
			s.savedRBPDepth = -1
		}
		return
	}
	s.depthKnown = false
}

func controlFlow(inst x86asm.Inst, next uint32, fl flow) flow {
	switch inst.Op {
	case x86asm.RET, x86asm.LRET, x86asm.IRET, x86asm.IRETD, x86asm.IRETQ,
		x86asm.UD0, x86asm.UD1, x86asm.UD2, x86asm.HLT:
		fl.fallThrough = false
	case x86asm.INT:
		if imm, ok := inst.Args[0].(x86asm.Imm); ok && imm == 3 {
			fl.fallThrough = false
		}
	case x86asm.JMP:
		fl.fallThrough = false
		fl.target, fl.hasTarget = relTarget(inst, next)
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE,
		x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO,
		x86asm.JP, x86asm.JS, x86asm.JCXZ, x86asm.JECXZ, x86asm.JRCXZ,
		x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		fl.target, fl.hasTarget = relTarget(inst, next)
	}
	return fl
}

// relTarget returns a direct branch's target offset; branches that leave the
// function (tail calls) have none.
func relTarget(inst x86asm.Inst, next uint32) (uint32, bool) {
	rel, ok := inst.Args[0].(x86asm.Rel)
	if !ok {
		return 0, false
	}
	t := int64(next) + int64(rel)
	if t < 0 || t >= MaxCodeSize {
		return 0, false
	}
	return uint32(t), true
}

func writesStackPointer(r x86asm.Reg) bool {
	return r == x86asm.RSP || r == x86asm.ESP || r == x86asm.SP || r == x86asm.SPB
}

func isFramePointer(r x86asm.Reg) bool {
	return r == x86asm.RBP || r == x86asm.EBP || r == x86asm.BP || r == x86asm.BPB
}
