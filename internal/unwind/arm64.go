package unwind

import (
	"encoding/binary"
	"strings"

	"golang.org/x/arch/arm64/arm64asm"
)

// arm64 keeps a function's return address in the link register (x30) until
// the function saves it, and the frame-pointer walk finds the caller only
// once x29 points at the function's own frame record. Between the two (a
// leaf that never saves a frame, a prologue, an epilogue after the frame
// record is restored) the walk skips the caller, which is in the link
// register: the sampler's leaf word 0 there (slot 0).

// linkState is what x30 and x29 hold before an instruction. Paths that
// disagree on one of them make it unknown.
type linkState struct {
	lr uint8 // lrHolds, lrOther
	fp uint8 // fpCaller, fpOwn, fpOther
}

const (
	lrHolds uint8 = iota // x30 holds the return address into the caller
	lrOther              // anything else, or unknown
)

const (
	fpCaller uint8 = iota // x29 is the caller's: the walk skips the caller
	fpOwn                 // x29 points at this function's frame record
	fpOther               // anything else, or unknown
)

func (s linkState) slot() int8 {
	if s.lr != lrHolds || s.fp != fpCaller {
		return -1
	}
	return 0
}

// join merges the states of two paths.
func (s linkState) join(o linkState) linkState {
	if s.lr != o.lr {
		s.lr = lrOther
	}
	if s.fp != o.fp {
		s.fp = fpOther
	}
	return s
}

// analyzeARM64 is Analyze for arm64 code: a dataflow over direct control
// flow from the entry, as explore does for x86-64. Code reached with two
// states (x30 overwritten on one path only) gets no answer.
func analyzeARM64(code []byte, funcStart uint64) *Function {
	f := &Function{start: funcStart, code: code, arm64: true}
	if len(code) > MaxCodeSize || funcStart%4 != 0 {
		return f
	}
	states := map[uint32]linkState{0: {lr: lrHolds, fp: fpCaller}}
	work := []uint32{0}
	// Unlike x86-64's, a call's fall-through is followed like any other
	// edge: the call has overwritten x30 whether it returns or not. The
	// entry keeps its state: a branch back to it (Go's morestack tail,
	// which calls the function again as from its caller) starts it over.
	join := func(off uint32, in linkState) {
		if off == 0 {
			return
		}
		old, seen := states[off]
		if seen {
			if in = old.join(in); in == old {
				return
			}
		}
		states[off] = in
		work = append(work, off)
	}
	for len(work) > 0 {
		off := work[len(work)-1]
		work = work[:len(work)-1]
		if int(off)+4 > len(code) {
			continue
		}
		inst, err := arm64asm.Decode(code[off : off+4])
		if err != nil {
			continue
		}
		out, fall, target, hasTarget := stepARM64(states[off], inst)
		next := off + 4
		if fall && int(next) < len(code) {
			join(next, out)
		}
		if hasTarget {
			if t := int64(off) + target; t >= 0 && t < int64(len(code)) && t%4 == 0 {
				join(uint32(t), out)
			}
		}
	}
	f.offsets, f.slots = answers(states)
	return f
}

// stepARM64 applies inst to s: the state after it, whether it falls
// through, and its direct branch target relative to it.
func stepARM64(s linkState, inst arm64asm.Inst) (out linkState, fall bool, target int64, hasTarget bool) {
	out = s
	switch inst.Op {
	case arm64asm.RET, arm64asm.BR, arm64asm.BRK, arm64asm.HLT:
		return out, false, 0, false
	case arm64asm.B:
		if rel, ok := inst.Args[0].(arm64asm.PCRel); ok {
			return out, false, int64(rel), true // unconditional
		}
		rel, ok := inst.Args[1].(arm64asm.PCRel)
		return out, true, int64(rel), ok
	case arm64asm.CBZ, arm64asm.CBNZ:
		rel, ok := inst.Args[1].(arm64asm.PCRel)
		return out, true, int64(rel), ok
	case arm64asm.TBZ, arm64asm.TBNZ:
		rel, ok := inst.Args[2].(arm64asm.PCRel)
		return out, true, int64(rel), ok
	case arm64asm.BL, arm64asm.BLR:
		out.lr = lrOther
		return out, true, 0, false
	}
	name := inst.Op.String()
	if strings.HasPrefix(name, "ST") || strings.HasPrefix(name, "CMP") || strings.HasPrefix(name, "CMN") ||
		strings.HasPrefix(name, "TST") || strings.HasPrefix(name, "PRFM") {
		return out, true, 0, false // writes no general register (but a base's writeback)
	}
	dsts := inst.Args[:1]
	if strings.HasPrefix(name, "LDP") || strings.HasPrefix(name, "LDNP") {
		dsts = inst.Args[:2]
	}
	// A load from the stack into x29 or x30 restores them: compiled code
	// reloads them only from where its prologue saved them.
	fromStack := false
	for _, a := range inst.Args {
		if m, ok := a.(arm64asm.MemImmediate); ok && arm64asm.Reg(m.Base) == arm64asm.SP {
			fromStack = strings.HasPrefix(name, "LD")
		}
	}
	for _, d := range dsts {
		switch regOf(d) {
		case arm64asm.X30:
			out.lr = lrOther
			if fromStack {
				out.lr = lrHolds
			}
		case arm64asm.X29:
			switch {
			case fromStack:
				out.fp = fpCaller
			case (inst.Op == arm64asm.MOV || inst.Op == arm64asm.ADD || inst.Op == arm64asm.SUB) && isSP(inst.Args[1]):
				out.fp = fpOwn
			default:
				out.fp = fpOther
			}
		}
	}
	return out, true, 0, false
}

// regOf returns the register a is, or an impossible one.
func regOf(a arm64asm.Arg) arm64asm.Reg {
	switch r := a.(type) {
	case arm64asm.Reg:
		return r
	case arm64asm.RegSP:
		if arm64asm.Reg(r) == arm64asm.SP {
			return arm64asm.WZR // not x29 nor x30
		}
		return arm64asm.Reg(r)
	}
	return arm64asm.WZR
}

func isSP(a arm64asm.Arg) bool {
	r, ok := a.(arm64asm.RegSP)
	return ok && arm64asm.Reg(r) == arm64asm.SP
}

// isRetARM64 reports whether the instruction at off of code is a return
// through x30: whatever path led there, x30 holds the return address and
// x29 the caller's frame pointer.
func isRetARM64(code []byte, off int) bool {
	if off < 0 || off%4 != 0 || off+4 > len(code) {
		return false
	}
	// RET (x30): 0xd65f03c0; its pointer-authenticating forms RETAA
	// and RETAB, 0xd65f0bff and 0xd65f0fff.
	switch binary.LittleEndian.Uint32(code[off:]) {
	case 0xd65f03c0, 0xd65f0bff, 0xd65f0fff:
		return true
	}
	return false
}
