package probesite

import (
	"bytes"
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Where a uprobe goes decides what it costs. On a hit the kernel either
// emulates the replaced instruction inside the trap handler, or copies it
// to a per-process page and single-steps it, a second trap.
// BenchmarkTrapCost measures one hit with an empty BPF program on this
// machine (2 vCPU VM, Linux 6.18):
//
//	push %reg            ~0.85 µs  emulated
//	nop (0x90)           ~1.4 µs   emulated
//	endbr64, lea, mov    ~9-11 µs  single-stepped
//	nopl 0(%rax,%rax,1)  ~13 µs    single-stepped: this kernel does not
//	                               emulate multi-byte nops
//	pop, ret             ~10-13 µs single-stepped
//	uretprobe return     ~0.5 µs   (on top of its entry hit; 6.11+ returns
//	                               through the uretprobe syscall)
//
// Hence the rules:
//   - Entry: keep an emulated first instruction; otherwise move the probe
//     forward over at most maxSkip straight-line instructions to the first
//     emulated one, only when that is provably the same event (see
//     placeEntry). Otherwise keep the entry and pay the single step.
//   - Exit of non-Go code: a uretprobe on the (placed) entry instruction.
//     It shares the entry's trap, so a call costs one emulated hit plus the
//     cheap return, instead of one or more single-stepped RET hits.
//     Caveat: the kernel drops return probes nested deeper than 64
//     (MAX_URETPROBE_DEPTH) per thread while their entries still fire, so
//     a function recursing deeper than that leaves its scope open for the
//     thread. RET sites would be immune but cost a single step (~10 µs)
//     per return, recursive returns included; we take the uretprobe.
//   - Exit of Go code (never a uretprobe): per
//     RET, an emulated instruction of the same basic block before it when
//     there is one (every path to the RET passes through it), else the RET.
//
// The kernel emulates (arch/x86/kernel/uprobes.c): nop (0x90, prefixes
// allowed), push of a register (with REX.B at most), and relative jmp,
// call and jcc without a 0x66 prefix. emulated encodes exactly that, minus
// what the measurements above contradict.

// maxSkip bounds how many instructions an entry probe moves over.
const maxSkip = 4

// instruction is one decoded instruction of a function.
type instruction struct {
	off   uint64 // from the function's start
	inst  x86asm.Inst
	raw   []byte
	endbr bool // ENDBR64/ENDBR32, which x86asm does not know
}

func (in *instruction) end() uint64 { return in.off + uint64(in.inst.Len) }

// name is the lower-case mnemonic, for placement notes.
func (in *instruction) name() string {
	if in.endbr {
		return "endbr64"
	}
	return strings.ToLower(in.inst.Op.String())
}

var (
	endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}
	endbr32 = []byte{0xf3, 0x0f, 0x1e, 0xfb}
)

// decodeAll decodes code linearly. Any byte sequence that does not decode
// fails the whole function: a probe must never land inside an instruction.
func decodeAll(code []byte) ([]instruction, error) {
	var insts []instruction
	for off := 0; off < len(code); {
		rest := code[off:]
		if bytes.HasPrefix(rest, endbr64) || bytes.HasPrefix(rest, endbr32) {
			insts = append(insts, instruction{off: uint64(off), inst: x86asm.Inst{Len: 4, Mode: 64}, raw: rest[:4], endbr: true})
			off += 4
			continue
		}
		inst, err := x86asm.Decode(rest, 64)
		if err != nil {
			return nil, fmt.Errorf("decoding instruction at +%#x: %w", off, err)
		}
		insts = append(insts, instruction{off: uint64(off), inst: inst, raw: rest[:inst.Len]})
		off += inst.Len
	}
	return insts, nil
}

// legacyPrefix reports the x86 legacy prefixes.
func legacyPrefix(b byte) bool {
	switch b {
	case 0x66, 0x67, 0xf0, 0xf2, 0xf3, 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65:
		return true
	}
	return false
}

// emulated reports whether the kernel runs in in its trap handler rather
// than single-stepping it (see the table above).
func emulated(in *instruction) bool {
	if in.endbr {
		return false
	}
	raw := in.raw
	has66 := false
	i := 0
	for ; i < len(raw) && legacyPrefix(raw[i]); i++ {
		has66 = has66 || raw[i] == 0x66
	}
	prefixes := i
	rex := byte(0)
	if i < len(raw) && raw[i]&0xf0 == 0x40 {
		rex = raw[i]
		i++
	}
	if i >= len(raw) {
		return false
	}
	op := raw[i]
	switch {
	case op == 0x90:
		// With REX.B, 0x90 is xchg %eax,%r8d.
		return rex == 0 && in.inst.Op == x86asm.NOP
	case op >= 0x50 && op <= 0x57:
		return prefixes == 0 && (rex == 0 || rex == 0x41)
	case op == 0xe8 || op == 0xe9 || op == 0xeb || (op >= 0x70 && op <= 0x7f):
		return !has66
	case op == 0x0f && i+1 < len(raw) && raw[i+1] >= 0x80 && raw[i+1] <= 0x8f:
		return !has66
	}
	return false
}

// branchTarget returns the function-relative target of a relative branch
// or call, and whether in has one.
func branchTarget(in *instruction) (int64, bool) {
	for _, a := range in.inst.Args {
		if rel, ok := a.(x86asm.Rel); ok {
			return int64(in.end()) + int64(rel), true
		}
	}
	return 0, false
}

// indirectJump reports a jump through a register or memory, whose targets
// decoding cannot know.
func indirectJump(in *instruction) bool {
	if in.inst.Op != x86asm.JMP {
		return false
	}
	_, rel := branchTarget(in)
	return !rel
}

// skippable reports an instruction an entry probe may move over: it falls
// through to the next one, and leaves the stack pointer (so a uretprobe at
// the moved site still finds the return address on top of the stack) and
// R14 (Go's g, which the scope key reads) alone.
func skippable(in *instruction) bool {
	if in.endbr {
		return true
	}
	switch in.inst.Op {
	case x86asm.LEA, x86asm.MOV, x86asm.MOVZX, x86asm.MOVSX, x86asm.MOVSXD,
		x86asm.XOR, x86asm.AND, x86asm.OR, x86asm.ADD, x86asm.SUB,
		x86asm.TEST, x86asm.CMP, x86asm.NOP:
	default:
		return false
	}
	if r, ok := in.inst.Args[0].(x86asm.Reg); ok {
		switch r {
		case x86asm.RSP, x86asm.ESP, x86asm.SP, x86asm.SPB, x86asm.R14, x86asm.R14L, x86asm.R14W, x86asm.R14B:
			return false
		}
	}
	return true
}

// findInstruction returns the index of the instruction starting at off.
func findInstruction(insts []instruction, off uint64) (int, bool) {
	for i := range insts {
		if insts[i].off == off {
			return i, true
		}
		if insts[i].off > off {
			break
		}
	}
	return 0, false
}

// placeEntry picks where a probe meant for fn.Start+from goes. It returns
// the function-relative offset and a note saying why.
//
// A probe at from fires once each time execution reaches from. Moving it to
// a later offset site fires at the same events exactly when every path into
// [from, site] enters at from and runs through to site:
//   - the skipped instructions are straight-line (skippable: no branch, no
//     call, no return);
//   - no branch in the function targets (from, site] (a branch to from
//     itself, like Go's morestack loop or a tail self-call, is fine: both
//     placements fire on it);
//   - the function has no indirect jump, which could target anything.
//
// Branches from other functions into fn's prologue are not looked for:
// compilers do not emit them.
func placeEntry(fn Function, insts []instruction, from uint64) (uint64, string) {
	i, ok := findInstruction(insts, from)
	if !ok {
		return from, fmt.Sprintf("entry kept at +%#x: not an instruction boundary", from)
	}
	first := &insts[i]
	if emulated(first) {
		return from, fmt.Sprintf("entry at +%#x: %s is emulated", from, first.name())
	}
	kept := func(why string) (uint64, string) {
		return from, fmt.Sprintf("entry kept at +%#x (%s, single-stepped): %s", from, first.name(), why)
	}
	site := -1
	for j := i; j < len(insts) && j <= i+maxSkip; j++ {
		if emulated(&insts[j]) {
			site = j
			break
		}
		if !skippable(&insts[j]) {
			return kept(fmt.Sprintf("%s at +%#x comes before any emulated instruction", insts[j].name(), insts[j].off))
		}
	}
	if site < 0 {
		return kept(fmt.Sprintf("no emulated instruction within %d instructions", maxSkip))
	}
	to := insts[site].off
	for j := range insts {
		in := &insts[j]
		if indirectJump(in) {
			return kept(fmt.Sprintf("indirect jump at +%#x might target the prologue", in.off))
		}
		if t, ok := branchTarget(in); ok && t > int64(from) && t <= int64(to) {
			return kept(fmt.Sprintf("%s at +%#x targets +%#x inside the skipped prologue", in.name(), in.off, t))
		}
	}
	return to, fmt.Sprintf("entry moved from +%#x (%s, single-stepped) to +%#x (%s, emulated)", from, first.name(), to, insts[site].name())
}

// placeReturn picks the site closing a scope at the RET insts[r]: the RET,
// or an emulated instruction just before it, separated from it only by
// epilogue instructions: nothing between them branches, and no branch
// targets (site, RET], so every path to the RET passes through the site and
// every pass through the site reaches the RET, a few cycles later.
func placeReturn(insts []instruction, r int, targets map[uint64]bool, indirect bool) (uint64, bool) {
	if indirect {
		return insts[r].off, false
	}
	for j := r - 1; j >= 0 && j >= r-maxSkip; j-- {
		in := &insts[j]
		if targets[insts[j+1].off] {
			break
		}
		if emulated(in) {
			if _, branch := branchTarget(in); branch {
				break
			}
			return in.off, true
		}
		if !epilogue(in) {
			break
		}
	}
	return insts[r].off, false
}

// epilogue reports the instructions that tear a frame down, which an exit
// site may precede: pops, leave, nops and stack-pointer adjustments.
func epilogue(in *instruction) bool {
	switch in.inst.Op {
	case x86asm.POP:
		// Go's scope key is R14, which must reach the RET unchanged.
		r, _ := in.inst.Args[0].(x86asm.Reg)
		return r != x86asm.R14
	case x86asm.LEAVE:
		return true
	case x86asm.NOP:
		return !in.endbr
	case x86asm.ADD, x86asm.LEA:
		r, ok := in.inst.Args[0].(x86asm.Reg)
		return ok && r == x86asm.RSP
	}
	return false
}

// branchTargets collects the function-relative targets of every relative
// branch and call in insts.
func branchTargets(insts []instruction) (targets map[uint64]bool, indirect bool) {
	targets = map[uint64]bool{}
	for i := range insts {
		if t, ok := branchTarget(&insts[i]); ok && t >= 0 {
			targets[uint64(t)] = true
		}
		indirect = indirect || indirectJump(&insts[i])
	}
	return targets, indirect
}
