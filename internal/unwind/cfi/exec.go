package cfi

import (
	"errors"
	"fmt"
	"math"
)

// regKind is a register rule of the CFI state machine.
type regKind uint8

const (
	regUnspecified regKind = iota // no rule: callee-saved, so unchanged
	regSame
	regUndefined
	regOffset    // saved at CFA+off
	regValOffset // value is CFA+off
	regRegister  // held in another register
	regExpr
	regValExpr
)

type regRule struct {
	kind regKind
	off  int64
}

// cfaKind is the CFA rule of the CFI state machine.
type cfaKind uint8

const (
	cfaReg cfaKind = iota
	cfaPLT
	cfaExpr // any other expression
)

// state is one row of the CFI state machine, restricted to what the
// unwinder reads: the CFA, the frame pointer and the return address.
type state struct {
	cfa          cfaKind
	cfaReg       uint64
	cfaOff       int64
	pltThreshold uint8
	fp, ra       regRule
}

// DW_CFA_* opcodes.
const (
	opAdvanceLoc = 0x40 // high two bits
	opOffset     = 0x80
	opRestore    = 0xc0

	opNop                     = 0x00
	opSetLoc                  = 0x01
	opAdvanceLoc1             = 0x02
	opAdvanceLoc2             = 0x03
	opAdvanceLoc4             = 0x04
	opOffsetExtended          = 0x05
	opRestoreExtended         = 0x06
	opUndefined               = 0x07
	opSameValue               = 0x08
	opRegister                = 0x09
	opRememberState           = 0x0a
	opRestoreState            = 0x0b
	opDefCFA                  = 0x0c
	opDefCFARegister          = 0x0d
	opDefCFAOffset            = 0x0e
	opDefCFAExpression        = 0x0f
	opExpression              = 0x10
	opOffsetExtendedSF        = 0x11
	opDefCFASF                = 0x12
	opDefCFAOffsetSF          = 0x13
	opValOffset               = 0x14
	opValOffsetSF             = 0x15
	opValExpression           = 0x16
	opAArch64NegateRAState    = 0x2d
	opGNUArgsSize             = 0x2e
	opGNUNegativeOffsetExtend = 0x2f
)

// machine runs CFA instructions. One machine is reused for every FDE so
// that its state stack is allocated once.
type machine struct {
	a       *arch
	c       *cie
	b       *bases
	initial state
	cur     state
	stack   []state
	loc     uint64
}

// setReg applies a rule to register reg; registers the unwinder does not
// read are ignored.
func (m *machine) setReg(reg uint64, r regRule) {
	switch reg {
	case m.a.fp:
		m.cur.fp = r
	case m.c.raReg:
		m.cur.ra = r
	}
}

func (m *machine) restoreReg(reg uint64) {
	switch reg {
	case m.a.fp:
		m.cur.fp = m.initial.fp
	case m.c.raReg:
		m.cur.ra = m.initial.ra
	}
}

// defCFAOffset changes the offset of a register-based CFA; on an
// expression CFA the op is invalid and the CFA becomes unknown.
func (m *machine) defCFAOffset(off int64) {
	m.cur.cfaOff = off
	if m.cur.cfa != cfaReg {
		m.cur.cfa = cfaExpr
	}
}

// factored multiplies a factored offset by the data alignment factor,
// refusing overflow.
func (m *machine) factored(v int64) (int64, error) {
	if v > math.MaxInt32 || v < math.MinInt32 {
		return 0, errors.New("offset out of range")
	}
	return v * m.c.dataAlign, nil
}

// run executes insns. emit is called with the state in force from the
// current location whenever the location is about to advance, and once at
// the end; emit returns false to stop (the location left the FDE).
// With emit nil (the CIE's initial instructions), advancing is an error.
func (m *machine) run(insns []byte, emit func(loc uint64, s *state) bool) error {
	r := &reader{b: insns}
	advance := func(delta uint64) bool {
		if emit == nil {
			r.fail(errors.New("location advanced in CIE initial instructions"))
			return false
		}
		if !emit(m.loc, &m.cur) {
			return false
		}
		if delta > math.MaxUint64/m.c.codeAlign {
			r.fail(errors.New("advance overflows"))
			return false
		}
		next := m.loc + delta*m.c.codeAlign
		if next < m.loc {
			r.fail(errors.New("advance overflows"))
			return false
		}
		m.loc = next
		return true
	}
	for r.left() > 0 && r.err == nil {
		op := r.u8()
		switch op & 0xc0 {
		case opAdvanceLoc:
			if !advance(uint64(op & 0x3f)) {
				return r.err
			}
			continue
		case opOffset:
			off, err := m.factored(int64(r.uleb() & math.MaxInt64))
			if err != nil {
				return err
			}
			m.setReg(uint64(op&0x3f), regRule{kind: regOffset, off: off})
			continue
		case opRestore:
			m.restoreReg(uint64(op & 0x3f))
			continue
		}
		switch op {
		case opNop:
		case opSetLoc:
			if emit == nil {
				return errors.New("location set in CIE initial instructions")
			}
			enc := m.c.fdeEnc
			if enc&0x70 == pePCRel {
				// pcrel is relative to the instruction stream, whose
				// address is not tracked; no compiler emits it here.
				return errors.New("pcrel DW_CFA_set_loc not supported")
			}
			to, err := r.encoded(enc, m.b, true)
			if err != nil {
				return fmt.Errorf("reading DW_CFA_set_loc: %w", err)
			}
			if to < m.loc {
				return errors.New("DW_CFA_set_loc moves backwards")
			}
			if !emit(m.loc, &m.cur) {
				return nil
			}
			m.loc = to
		case opAdvanceLoc1:
			if !advance(uint64(r.u8())) {
				return r.err
			}
		case opAdvanceLoc2:
			if !advance(uint64(r.u16())) {
				return r.err
			}
		case opAdvanceLoc4:
			if !advance(uint64(r.u32())) {
				return r.err
			}
		case opOffsetExtended:
			reg := r.uleb()
			off, err := m.factored(int64(r.uleb() & math.MaxInt64))
			if err != nil {
				return err
			}
			m.setReg(reg, regRule{kind: regOffset, off: off})
		case opOffsetExtendedSF:
			reg := r.uleb()
			off, err := m.factored(r.sleb())
			if err != nil {
				return err
			}
			m.setReg(reg, regRule{kind: regOffset, off: off})
		case opGNUNegativeOffsetExtend:
			reg := r.uleb()
			off, err := m.factored(-int64(r.uleb() & math.MaxInt32))
			if err != nil {
				return err
			}
			m.setReg(reg, regRule{kind: regOffset, off: off})
		case opValOffset:
			reg := r.uleb()
			off, err := m.factored(int64(r.uleb() & math.MaxInt64))
			if err != nil {
				return err
			}
			m.setReg(reg, regRule{kind: regValOffset, off: off})
		case opValOffsetSF:
			reg := r.uleb()
			off, err := m.factored(r.sleb())
			if err != nil {
				return err
			}
			m.setReg(reg, regRule{kind: regValOffset, off: off})
		case opRestoreExtended:
			m.restoreReg(r.uleb())
		case opUndefined:
			m.setReg(r.uleb(), regRule{kind: regUndefined})
		case opSameValue:
			m.setReg(r.uleb(), regRule{kind: regSame})
		case opRegister:
			reg := r.uleb()
			r.uleb()
			m.setReg(reg, regRule{kind: regRegister})
		case opRememberState:
			if len(m.stack) >= maxStateStack {
				return errors.New("DW_CFA_remember_state nests too deep")
			}
			m.stack = append(m.stack, m.cur)
		case opRestoreState:
			if len(m.stack) == 0 {
				return errors.New("DW_CFA_restore_state with nothing remembered")
			}
			// Like GCC's and LLVM's unwinders, the CFA is restored too.
			m.cur = m.stack[len(m.stack)-1]
			m.stack = m.stack[:len(m.stack)-1]
		case opDefCFA:
			m.cur.cfa = cfaReg
			m.cur.cfaReg = r.uleb()
			m.cur.cfaOff = int64(r.uleb() & math.MaxInt64)
		case opDefCFASF:
			m.cur.cfa = cfaReg
			m.cur.cfaReg = r.uleb()
			off, err := m.factored(r.sleb())
			if err != nil {
				return err
			}
			m.cur.cfaOff = off
		case opDefCFARegister:
			m.cur.cfa = cfaReg
			m.cur.cfaReg = r.uleb()
		case opDefCFAOffset:
			m.defCFAOffset(int64(r.uleb() & math.MaxInt64))
		case opDefCFAOffsetSF:
			off, err := m.factored(r.sleb())
			if err != nil {
				return err
			}
			m.defCFAOffset(off)
		case opDefCFAExpression:
			expr := r.bytes(int(min(r.uleb(), math.MaxInt32)))
			if off, th, ok := pltExpression(expr); ok {
				m.cur.cfa, m.cur.cfaOff, m.cur.pltThreshold = cfaPLT, off, th
			} else {
				m.cur.cfa = cfaExpr
			}
		case opExpression:
			reg := r.uleb()
			r.bytes(int(min(r.uleb(), math.MaxInt32)))
			m.setReg(reg, regRule{kind: regExpr})
		case opValExpression:
			reg := r.uleb()
			r.bytes(int(min(r.uleb(), math.MaxInt32)))
			m.setReg(reg, regRule{kind: regValExpr})
		case opGNUArgsSize:
			r.uleb()
		case opAArch64NegateRAState:
			// Saved return addresses are signed from here on: the
			// walk strips the signature from every one it reads.
			if !m.a.raSigned {
				return fmt.Errorf("DW_CFA op %#x not supported", op)
			}
		default:
			return fmt.Errorf("DW_CFA op %#x not supported", op)
		}
	}
	if r.err != nil {
		return fmt.Errorf("reading CFA instructions: %w", r.err)
	}
	if emit != nil {
		emit(m.loc, &m.cur)
	}
	return nil
}

// DW_OP_* opcodes of the PLT expression.
const (
	dwOpBreg7  = 0x77
	dwOpBreg16 = 0x80
	dwOpLit0   = 0x30
	dwOpLit31  = 0x4f
	dwOpAnd    = 0x1a
	dwOpGe     = 0x2a
	dwOpShl    = 0x24
	dwOpPlus   = 0x22
	dwOpLit3   = 0x33
	dwOpLit15  = 0x3f
)

// pltExpression recognizes the CFA expression of PLT entries,
//
//	DW_OP_breg7 (rsp) off; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
//	DW_OP_litN; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
//
// that is CFA = RSP + off + ((RIP & 15) >= N ? 8 : 0).
func pltExpression(expr []byte) (off int64, threshold uint8, ok bool) {
	r := &reader{b: expr}
	if r.u8() != dwOpBreg7 {
		return 0, 0, false
	}
	off = r.sleb()
	if r.u8() != dwOpBreg16 || r.sleb() != 0 || r.u8() != dwOpLit15 || r.u8() != dwOpAnd {
		return 0, 0, false
	}
	lit := r.u8()
	if lit < dwOpLit0 || lit > dwOpLit31 {
		return 0, 0, false
	}
	if r.u8() != dwOpGe || r.u8() != dwOpLit3 || r.u8() != dwOpShl || r.u8() != dwOpPlus {
		return 0, 0, false
	}
	if r.err != nil || r.left() != 0 {
		return 0, 0, false
	}
	return off, lit - dwOpLit0, true
}

// row converts a state into a table row at pc.
func (s *state) row(a *arch, pc uint64, signal bool) Row {
	if signal {
		return Row{PC: pc, CFA: CFASignal}
	}
	row := Row{PC: pc}
	switch k := s.ra.kind; {
	case k == regUndefined:
		return Row{PC: pc, CFA: CFAEnd}
	case k == regOffset && s.ra.off == -8:
		row.RA = RACallSlot
	case k == regOffset && a.raInLink && s.ra.off >= math.MinInt32 && s.ra.off <= math.MaxInt32:
		row.RA, row.RAOffset = RAAtCFA, int32(s.ra.off)
	case (k == regUnspecified || k == regSame) && a.raInLink:
		row.RA = RAInLink
	default:
		return Row{PC: pc, CFA: CFAUnsupported}
	}
	if s.cfaOff > math.MaxInt32 || s.cfaOff < math.MinInt32 {
		return Row{PC: pc, CFA: CFAUnsupported}
	}
	switch {
	case s.cfa == cfaPLT:
		row.CFA, row.CFAOffset, row.PLTThreshold = CFAPLT, int32(s.cfaOff), s.pltThreshold
	case s.cfa == cfaReg && s.cfaReg == a.sp:
		row.CFA, row.CFAOffset = CFASP, int32(s.cfaOff)
	case s.cfa == cfaReg && s.cfaReg == a.fp:
		row.CFA, row.CFAOffset = CFAFP, int32(s.cfaOff)
	default:
		return Row{PC: pc, CFA: CFAUnsupported}
	}
	switch s.fp.kind {
	case regUnspecified, regSame:
		row.FP = FPUnchanged
	case regOffset:
		if s.fp.off > math.MaxInt32 || s.fp.off < math.MinInt32 {
			row.FP = FPUnsupported
			break
		}
		row.FP, row.FPOffset = FPAtCFA, int32(s.fp.off)
	default:
		row.FP = FPUnsupported
	}
	return row
}
