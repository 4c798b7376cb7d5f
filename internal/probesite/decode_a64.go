package probesite

import (
	"fmt"
	"strings"

	"golang.org/x/arch/arm64/arm64asm"
)

// decodeARM64 decodes arm64 code (decodeAll). Its instructions are 4
// bytes, aligned: one the decoder does not know (a newer extension's)
// cannot make a probe land inside another, so it is kept, as neither
// emulated nor skippable.
func decodeARM64(code []byte) ([]instruction, error) {
	if len(code)%4 != 0 {
		return nil, fmt.Errorf("arm64 code of %d bytes, not whole instructions", len(code))
	}
	insts := make([]instruction, 0, len(code)/4)
	for off := 0; off < len(code); off += 4 {
		in := instruction{off: uint64(off), len: 4, name: ".inst"}
		inst, err := arm64asm.Decode(code[off : off+4])
		if err == nil {
			in.name = strings.ToLower(inst.Op.String())
			in.emulated = simulatedARM64(inst)
			in.skippable = skippableARM64(inst)
			in.epilogue = epilogueARM64(inst)
			in.ret = inst.Op == arm64asm.RET
			in.indirectJump = inst.Op == arm64asm.BR
			for _, a := range inst.Args {
				if rel, ok := a.(arm64asm.PCRel); ok && inst.Op != arm64asm.ADR && inst.Op != arm64asm.ADRP && !isLoad(inst) {
					in.target, in.hasTarget = int64(off)+int64(rel), true
				}
			}
		}
		insts = append(insts, in)
	}
	return insts, nil
}

// simulatedARM64 reports the instructions arm64's kernel runs in its trap
// handler (arch/arm64/kernel/probes/decode-insn.c): branches, adr, adrp
// and literal loads.
func simulatedARM64(inst arm64asm.Inst) bool {
	switch inst.Op {
	case arm64asm.B, arm64asm.BL, arm64asm.CBZ, arm64asm.CBNZ, arm64asm.TBZ, arm64asm.TBNZ,
		arm64asm.BR, arm64asm.BLR, arm64asm.RET, arm64asm.ADR, arm64asm.ADRP:
		return true
	case arm64asm.LDR, arm64asm.LDRSW:
		_, literal := inst.Args[1].(arm64asm.PCRel)
		return literal
	}
	return false
}

func isLoad(inst arm64asm.Inst) bool { return strings.HasPrefix(inst.Op.String(), "LD") }

// skippableARM64 reports an instruction an entry probe may move over
// (instruction.skippable): arithmetic, moves and compares whose
// destination is none of SP, x28 (Go's g), x29 or x30. A store is never
// one: the prologue's store of x30 must come after the entry probe, where
// a uretprobe replaces x30.
func skippableARM64(inst arm64asm.Inst) bool {
	switch inst.Op {
	case arm64asm.NOP:
		return true
	case arm64asm.CMP, arm64asm.CMN, arm64asm.TST:
		return true
	case arm64asm.MOV, arm64asm.MOVZ, arm64asm.MOVK, arm64asm.MOVN, arm64asm.ADD, arm64asm.SUB,
		arm64asm.AND, arm64asm.ORR, arm64asm.EOR, arm64asm.LSL, arm64asm.LSR, arm64asm.ASR:
	default:
		return false
	}
	switch dst := regArg(inst.Args[0]); dst {
	case arm64asm.SP, arm64asm.X28, arm64asm.X29, arm64asm.X30, arm64asm.W28, arm64asm.W29, arm64asm.W30:
		return false
	}
	return true
}

// epilogueARM64 reports the instructions that tear a frame down, which an
// exit site may precede: loads of the saved registers from the stack,
// stack-pointer adjustments and nops, none writing x28 (Go's scope key).
func epilogueARM64(inst arm64asm.Inst) bool {
	switch inst.Op {
	case arm64asm.NOP:
		return true
	case arm64asm.ADD:
		return regArg(inst.Args[0]) == arm64asm.SP
	case arm64asm.LDP, arm64asm.LDR:
		n := 1
		if inst.Op == arm64asm.LDP {
			n = 2
		}
		for _, a := range inst.Args[:n] {
			if r := regArg(a); r == arm64asm.X28 || r == arm64asm.W28 {
				return false
			}
		}
		m, ok := inst.Args[n].(arm64asm.MemImmediate)
		return ok && arm64asm.Reg(m.Base) == arm64asm.SP
	}
	return false
}

// regArg returns the register a names, SP for the stack pointer, or an
// impossible register.
func regArg(a arm64asm.Arg) arm64asm.Reg {
	switch r := a.(type) {
	case arm64asm.Reg:
		return r
	case arm64asm.RegSP:
		return arm64asm.Reg(r)
	}
	return arm64asm.Reg(0xffff)
}

// afterStackCheckA64 returns the offset in code, a Go function's start on
// arm64, after its stack-bound check: a load of the stack bound from g
// (x28), then a branch if lower or same (b.ls) to morestack. It returns 0
// when there is none.
func afterStackCheckA64(code []byte) uint64 {
	loadedBound := false
	for off, n := 0, 0; off+4 <= len(code) && n < maxPrologue; off, n = off+4, n+1 {
		inst, err := arm64asm.Decode(code[off : off+4])
		if err != nil {
			return 0
		}
		switch inst.Op {
		case arm64asm.LDR:
			if m, ok := inst.Args[1].(arm64asm.MemImmediate); ok && arm64asm.Reg(m.Base) == arm64asm.X28 {
				loadedBound = true
			}
		case arm64asm.B:
			c, conditional := inst.Args[0].(arm64asm.Cond)
			if conditional && loadedBound && c.String() == "LS" {
				return uint64(off + 4)
			}
			return 0
		case arm64asm.RET, arm64asm.BL, arm64asm.BR, arm64asm.BLR:
			return 0
		}
	}
	return 0
}
