package probesite

import (
	"debug/elf"
	"fmt"
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
// call and jcc without a 0x66 prefix. decode_x86.go's emulated encodes
// exactly that, minus what the measurements above contradict.
//
// arm64 (arch/arm64/kernel/probes/decode-insn.c) simulates its branches
// (b, bl, b.cond, cbz, cbnz, tbz, tbnz, br, blr, ret), adr, adrp and
// literal loads, and single-steps the rest (decode_a64.go). The rules are
// the same; a function's first instruction there is rarely simulated, so
// its entries mostly stay, and a RET is one. BenchmarkScopeHitRatio in
// make vmtest's arm64 6.1 (emulated, so only ratios count): an entry and
// uretprobe pair on a single-stepped stp cost 2.7 times the pair on a
// simulated b.

// maxSkip bounds how many instructions an entry probe moves over.
const maxSkip = 4

// instruction is one decoded instruction of a function, with what placing
// probes needs to know of it, whatever the architecture.
type instruction struct {
	off  uint64 // from the function's start
	len  uint64
	name string // lower-case mnemonic, for placement notes
	// emulated: the kernel runs it in its trap handler rather than
	// single-stepping it.
	emulated bool
	// skippable: an entry probe may move over it. It falls through to
	// the next one, and leaves the stack pointer (so a uretprobe at the
	// moved site still finds the return address where the call left it)
	// and Go's g register (which the scope key reads) alone.
	skippable bool
	// epilogue: it tears a frame down (pops, leave, nops, stack-pointer
	// adjustments), which an exit site may precede.
	epilogue bool
	ret      bool // a return
	// target is a relative branch's or call's function-relative target,
	// when hasTarget.
	target    int64
	hasTarget bool
	// indirectJump: a jump through a register or memory, whose targets
	// decoding cannot know.
	indirectJump bool
}

func (in *instruction) end() uint64 { return in.off + in.len }

// decodeAll decodes the code of a function of a machine linearly. Any
// byte sequence that does not decode fails the whole function: a probe
// must never land inside an instruction.
func decodeAll(code []byte, machine elf.Machine) ([]instruction, error) {
	switch machine {
	case elf.EM_X86_64:
		return decodeX86(code)
	case elf.EM_AARCH64:
		return decodeARM64(code)
	}
	return nil, fmt.Errorf("decoding %v machine code: only x86-64 and arm64 are placed", machine)
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
	if first.emulated {
		return from, fmt.Sprintf("entry at +%#x: %s is emulated", from, first.name)
	}
	kept := func(why string) (uint64, string) {
		return from, fmt.Sprintf("entry kept at +%#x (%s, single-stepped): %s", from, first.name, why)
	}
	site := -1
	for j := i; j < len(insts) && j <= i+maxSkip; j++ {
		if insts[j].emulated {
			site = j
			break
		}
		if !insts[j].skippable {
			return kept(fmt.Sprintf("%s at +%#x comes before any emulated instruction", insts[j].name, insts[j].off))
		}
	}
	if site < 0 {
		return kept(fmt.Sprintf("no emulated instruction within %d instructions", maxSkip))
	}
	to := insts[site].off
	for j := range insts {
		in := &insts[j]
		if in.indirectJump {
			return kept(fmt.Sprintf("indirect jump at +%#x might target the prologue", in.off))
		}
		if in.hasTarget && in.target > int64(from) && in.target <= int64(to) {
			return kept(fmt.Sprintf("%s at +%#x targets +%#x inside the skipped prologue", in.name, in.off, in.target))
		}
	}
	return to, fmt.Sprintf("entry moved from +%#x (%s, single-stepped) to +%#x (%s, emulated)", from, first.name, to, insts[site].name)
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
		if in.emulated {
			if in.hasTarget {
				break
			}
			return in.off, true
		}
		if !in.epilogue {
			break
		}
	}
	return insts[r].off, false
}

// branchTargets collects the function-relative targets of every relative
// branch and call in insts.
func branchTargets(insts []instruction) (targets map[uint64]bool, indirect bool) {
	targets = map[uint64]bool{}
	for i := range insts {
		if in := &insts[i]; in.hasTarget && in.target >= 0 {
			targets[uint64(in.target)] = true
		}
		indirect = indirect || insts[i].indirectJump
	}
	return targets, indirect
}
