package probesite

import (
	"bytes"
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

var (
	endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}
	endbr32 = []byte{0xf3, 0x0f, 0x1e, 0xfb}
)

// decodeX86 decodes x86-64 code linearly (decodeAll).
func decodeX86(code []byte) ([]instruction, error) {
	var insts []instruction
	for off := 0; off < len(code); {
		rest := code[off:]
		if bytes.HasPrefix(rest, endbr64) || bytes.HasPrefix(rest, endbr32) {
			// x86asm reads ENDBR64/ENDBR32 as a stray prefix.
			insts = append(insts, instruction{off: uint64(off), len: 4, name: "endbr64", skippable: true})
			off += 4
			continue
		}
		inst, err := x86asm.Decode(rest, 64)
		if err != nil {
			return nil, fmt.Errorf("decoding instruction at +%#x: %w", off, err)
		}
		in := instruction{
			off:       uint64(off),
			len:       uint64(inst.Len),
			name:      strings.ToLower(inst.Op.String()),
			emulated:  emulatedX86(inst, rest[:inst.Len]),
			skippable: skippableX86(inst),
			epilogue:  epilogueX86(inst),
			ret:       inst.Op == x86asm.RET,
		}
		for _, a := range inst.Args {
			if rel, ok := a.(x86asm.Rel); ok {
				in.target, in.hasTarget = int64(in.end())+int64(rel), true
			}
		}
		in.indirectJump = inst.Op == x86asm.JMP && !in.hasTarget
		insts = append(insts, in)
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

// emulatedX86 reports whether the kernel runs inst (raw its bytes) in its
// trap handler rather than single-stepping it (see placement.go).
func emulatedX86(inst x86asm.Inst, raw []byte) bool {
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
		return rex == 0 && inst.Op == x86asm.NOP
	case op >= 0x50 && op <= 0x57:
		return prefixes == 0 && (rex == 0 || rex == 0x41)
	case op == 0xe8 || op == 0xe9 || op == 0xeb || (op >= 0x70 && op <= 0x7f):
		return !has66
	case op == 0x0f && i+1 < len(raw) && raw[i+1] >= 0x80 && raw[i+1] <= 0x8f:
		return !has66
	}
	return false
}

// skippableX86 reports an instruction an entry probe may move over
// (instruction.skippable); R14 is Go's g.
func skippableX86(inst x86asm.Inst) bool {
	switch inst.Op {
	case x86asm.LEA, x86asm.MOV, x86asm.MOVZX, x86asm.MOVSX, x86asm.MOVSXD,
		x86asm.XOR, x86asm.AND, x86asm.OR, x86asm.ADD, x86asm.SUB,
		x86asm.TEST, x86asm.CMP, x86asm.NOP:
	default:
		return false
	}
	if r, ok := inst.Args[0].(x86asm.Reg); ok {
		switch r {
		case x86asm.RSP, x86asm.ESP, x86asm.SP, x86asm.SPB, x86asm.R14, x86asm.R14L, x86asm.R14W, x86asm.R14B:
			return false
		}
	}
	return true
}

// epilogueX86 reports the instructions that tear a frame down, which an
// exit site may precede: pops, leave, nops and stack-pointer adjustments.
func epilogueX86(inst x86asm.Inst) bool {
	switch inst.Op {
	case x86asm.POP:
		// Go's scope key is R14, which must reach the RET unchanged.
		r, _ := inst.Args[0].(x86asm.Reg)
		return r != x86asm.R14
	case x86asm.LEAVE:
		return true
	case x86asm.NOP:
		return true
	case x86asm.ADD, x86asm.LEA:
		r, ok := inst.Args[0].(x86asm.Reg)
		return ok && r == x86asm.RSP
	}
	return false
}
