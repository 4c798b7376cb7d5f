package x86sym

import (
	"errors"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Stop is how a run ended.
type Stop uint8

// Ways a run ends.
const (
	// Returned: the function returned; Result.Return is RAX.
	Returned Stop = iota + 1
	// Called: the function called, or jumped to, code outside it that
	// Machine.Call did not step over; Result.Target is the callee and
	// Result.Args its first argument (RDI).
	Called
)

// Result is the state a run ended in.
type Result struct {
	Stop Stop
	// Return is RAX at a return; nil when unknown.
	Return *Expr
	// Target is the callee of a call or jump out of the function, and
	// Args the RDI it was called with.
	Target uint64
	Args   *Expr
	// Loads lists the addresses the run loaded from, in order.
	Loads []*Expr
}

// Machine runs one function.
type Machine struct {
	// Code is the function's machine code, Addr its address.
	Code []byte
	Addr uint64
	// Arg is RDI at entry: a constant, or nil for the symbolic Arg.
	Arg *Expr
	// Global returns the value at a constant address that the loader
	// fixed before the code ran (a GOT slot's relocation), if any; the
	// load stays symbolic otherwise.
	Global func(addr uint64, size int) (int64, bool)
	// Call, when set, may step over a call to target (not a jump): its
	// result is what RAX holds after it. Returning false ends the run
	// with Called.
	Call func(target uint64, args *Expr) (*Expr, bool)
	// MaxSteps bounds the instructions run; zero means 256.
	MaxSteps int
}

// ErrUnsupported is returned for an instruction the machine cannot follow
// where it matters (a branch on what it does not know, an indirect jump).
var ErrUnsupported = errors.New("unsupported instruction")

// flags are what the last comparison compared: a-b (cmp) or a&b (test).
type flags struct {
	a, b *Expr
	test bool
	set  bool
}

type state struct {
	regs  [16]*Expr
	flags flags
	loads []*Expr
}

// endbr64 is ENDBR64, which x86asm does not know.
var endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}

// Decode decodes the 64-bit instruction at the start of code; ENDBR64
// decodes as a NOP of its length.
func Decode(code []byte) (x86asm.Inst, error) {
	if len(code) >= 4 && string(code[:4]) == string(endbr64) {
		return x86asm.Inst{Op: x86asm.NOP, Len: 4, Mode: 64}, nil
	}
	return x86asm.Decode(code, 64)
}

// regIndex maps any size of a general register to its 64-bit slot;
// -1 for others.
func regIndex(r x86asm.Reg) int {
	switch {
	case r >= x86asm.RAX && r <= x86asm.R15:
		return int(r - x86asm.RAX)
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return int(r - x86asm.EAX)
	case r >= x86asm.AX && r <= x86asm.R15W:
		return int(r - x86asm.AX)
	case r >= x86asm.AL && r <= x86asm.BL:
		return int(r - x86asm.AL)
	case r >= x86asm.SPB && r <= x86asm.R15B:
		return int(r-x86asm.SPB) + 4
	}
	return -1
}

// regBits is the width of r in bits; 0 for AH..BH (not modelled).
func regBits(r x86asm.Reg) int {
	switch {
	case r >= x86asm.RAX && r <= x86asm.R15:
		return 64
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return 32
	case r >= x86asm.AX && r <= x86asm.R15W:
		return 16
	case r >= x86asm.AL && r <= x86asm.BL, r >= x86asm.SPB && r <= x86asm.R15B:
		return 8
	}
	return 0
}

// Run runs the function from its first instruction.
//
// A conditional branch whose outcome depends on what the machine does not
// know takes the fast path of the lookups it is meant for: two unknown
// values compared are equal (a generation or sequence number matches),
// an unknown value is not equal to a constant (a pointer is not NULL, a
// slot is not -1). An unknown ordering (ja, jl) is unsupported.
func (m *Machine) Run() (*Result, error) {
	maxSteps := m.MaxSteps
	if maxSteps <= 0 {
		maxSteps = 256
	}
	var st state
	st.regs[regIndex(x86asm.RDI)] = m.Arg
	if m.Arg == nil {
		st.regs[regIndex(x86asm.RDI)] = Single(Arg, nil, 0)
	}
	pc := m.Addr
	end := m.Addr + uint64(len(m.Code))
	for range maxSteps {
		if pc < m.Addr || pc >= end {
			return nil, fmt.Errorf("running %#x: left the function at %#x", m.Addr, pc)
		}
		inst, err := Decode(m.Code[pc-m.Addr:])
		if err != nil {
			return nil, fmt.Errorf("decoding %#x: %w", pc, err)
		}
		next := pc + uint64(inst.Len)
		res, jump, err := m.step(&st, &inst, pc, next)
		if err != nil {
			return nil, fmt.Errorf("at %#x (%v): %w", pc, inst, err)
		}
		if res != nil {
			res.Loads = st.loads
			return res, nil
		}
		pc = next
		if jump != 0 {
			pc = jump
		}
	}
	return nil, fmt.Errorf("running %#x: more than %d instructions", m.Addr, maxSteps)
}

// step runs one instruction: it returns the result when the run ends, or
// the target of a jump taken.
func (m *Machine) step(st *state, inst *x86asm.Inst, pc, next uint64) (*Result, uint64, error) {
	args := inst.Args
	switch inst.Op {
	case x86asm.NOP, x86asm.PUSH:
		return nil, 0, nil
	case x86asm.RET:
		return &Result{Stop: Returned, Return: st.regs[0]}, 0, nil
	case x86asm.MOV, x86asm.MOVZX, x86asm.MOVSXD, x86asm.MOVSX:
		if _, ok := args[0].(x86asm.Mem); ok {
			return nil, 0, nil // a store: memory is not modelled
		}
		v := m.value(st, inst, args[1], next)
		if inst.Op == x86asm.MOVSX || inst.Op == x86asm.MOVSXD {
			v = signExtend(v, inst.MemBytes, args[1])
		}
		m.set(st, args[0], v)
	case x86asm.LEA:
		mem, _ := args[1].(x86asm.Mem)
		m.set(st, args[0], m.address(st, mem, next))
	case x86asm.ADD, x86asm.SUB:
		a, b := m.value(st, inst, args[0], next), m.value(st, inst, args[1], next)
		if inst.Op == x86asm.SUB {
			b = Scale(b, -1)
		}
		m.set(st, args[0], Add(a, b))
		st.flags = flags{}
	case x86asm.SHL:
		a, n := m.value(st, inst, args[0], next), m.value(st, inst, args[1], next)
		if n.IsConst() && n.Const >= 0 && n.Const < 63 {
			m.set(st, args[0], Scale(a, 1<<n.Const))
		} else {
			m.set(st, args[0], nil)
		}
		st.flags = flags{}
	case x86asm.IMUL:
		if len(args) == 3 && args[2] != nil {
			a, k := m.value(st, inst, args[1], next), m.value(st, inst, args[2], next)
			if k.IsConst() {
				m.set(st, args[0], Scale(a, k.Const))
				break
			}
		}
		m.set(st, args[0], nil)
		st.flags = flags{}
	case x86asm.SHR, x86asm.SAR, x86asm.AND, x86asm.OR:
		a, b := m.value(st, inst, args[0], next), m.value(st, inst, args[1], next)
		var v *Expr
		if a.IsConst() && b.IsConst() {
			switch inst.Op {
			case x86asm.SHR:
				v = Const(int64(uint64(a.Const) >> uint(b.Const&63)))
			case x86asm.SAR:
				v = Const(a.Const >> uint(b.Const&63))
			case x86asm.AND:
				v = Const(a.Const & b.Const)
			case x86asm.OR:
				v = Const(a.Const | b.Const)
			}
		}
		m.set(st, args[0], v)
		st.flags = flags{a: v, b: Const(0), test: true, set: v != nil}
	case x86asm.XOR:
		if r0, ok := args[0].(x86asm.Reg); ok && args[1] == args[0] {
			m.set(st, r0, Const(0))
		} else {
			m.set(st, args[0], nil)
		}
		st.flags = flags{}
	case x86asm.CMP:
		st.flags = flags{a: m.value(st, inst, args[0], next), b: m.value(st, inst, args[1], next), set: true}
	case x86asm.TEST:
		st.flags = flags{a: m.value(st, inst, args[0], next), b: m.value(st, inst, args[1], next), test: true, set: true}
	case x86asm.JMP:
		rel, ok := args[0].(x86asm.Rel)
		if !ok {
			return nil, 0, ErrUnsupported
		}
		target := uint64(int64(next) + int64(rel))
		if m.inside(target) {
			return nil, target, nil
		}
		return &Result{Stop: Called, Target: target, Args: st.regs[regIndex(x86asm.RDI)], Return: st.regs[0]}, 0, nil
	case x86asm.CALL:
		rel, ok := args[0].(x86asm.Rel)
		if !ok {
			return nil, 0, ErrUnsupported
		}
		target := uint64(int64(next) + int64(rel))
		rdi := st.regs[regIndex(x86asm.RDI)]
		if m.Call != nil {
			if ret, ok := m.Call(target, rdi); ok {
				// Caller-saved registers are lost across the call.
				for _, r := range []x86asm.Reg{x86asm.RCX, x86asm.RDX, x86asm.RSI, x86asm.RDI, x86asm.R8, x86asm.R9, x86asm.R10, x86asm.R11} {
					st.regs[regIndex(r)] = nil
				}
				st.regs[0] = ret
				st.flags = flags{}
				return nil, 0, nil
			}
		}
		return &Result{Stop: Called, Target: target, Args: rdi}, 0, nil
	default:
		if isJcc(inst.Op) {
			rel, ok := args[0].(x86asm.Rel)
			if !ok {
				return nil, 0, ErrUnsupported
			}
			taken, err := st.flags.taken(inst.Op)
			if err != nil {
				return nil, 0, err
			}
			if taken {
				return nil, uint64(int64(next) + int64(rel)), nil
			}
			return nil, 0, nil
		}
		// Anything else is assumed to write its first operand when it
		// is a register, to an unknown value.
		if r, ok := args[0].(x86asm.Reg); ok {
			m.set(st, r, nil)
		}
		st.flags = flags{}
	}
	return nil, 0, nil
}

func (m *Machine) inside(addr uint64) bool {
	return addr >= m.Addr && addr < m.Addr+uint64(len(m.Code))
}

// set writes v into a register operand; a narrower write of a known
// value keeps it (the keys, offsets and pointers modelled fit).
func (m *Machine) set(st *state, arg x86asm.Arg, v *Expr) {
	r, ok := arg.(x86asm.Reg)
	if !ok {
		return
	}
	i := regIndex(r)
	if i < 0 {
		return
	}
	bits := regBits(r)
	if v.IsConst() && bits == 32 {
		v = Const(int64(uint32(v.Const)))
	}
	if bits < 32 {
		v = nil // partial writes are not modelled
	}
	st.regs[i] = v
}

// value reads an operand.
func (m *Machine) value(st *state, inst *x86asm.Inst, arg x86asm.Arg, next uint64) *Expr {
	switch a := arg.(type) {
	case x86asm.Reg:
		i := regIndex(a)
		if i < 0 || regBits(a) < 32 {
			return nil
		}
		v := st.regs[i]
		if v.IsConst() && regBits(a) == 32 {
			v = Const(int64(uint32(v.Const)))
		}
		return v
	case x86asm.Imm:
		return Const(int64(a))
	case x86asm.Mem:
		addr := m.address(st, a, next)
		if addr == nil {
			return nil
		}
		st.loads = append(st.loads, addr)
		if addr.IsConst() && m.Global != nil {
			size := inst.MemBytes
			if size == 0 {
				size = inst.DataSize / 8
			}
			if v, ok := m.Global(uint64(addr.Const), size); ok {
				return Const(v)
			}
		}
		return Single(Load, addr, 0)
	}
	return nil
}

// address computes a memory operand's address.
func (m *Machine) address(st *state, mem x86asm.Mem, next uint64) *Expr {
	addr := Const(mem.Disp)
	switch {
	case mem.Base == x86asm.RIP:
		addr = Const(int64(next) + mem.Disp)
	case mem.Base != 0:
		i := regIndex(mem.Base)
		if i < 0 {
			return nil
		}
		addr = Add(addr, st.regs[i])
	}
	if mem.Index != 0 {
		i := regIndex(mem.Index)
		if i < 0 {
			return nil
		}
		addr = Add(addr, Scale(st.regs[i], int64(mem.Scale)))
	}
	switch mem.Segment {
	case 0, x86asm.DS, x86asm.SS, x86asm.ES:
	case x86asm.FS:
		addr = Add(addr, Single(TP, nil, 0))
	default:
		return nil
	}
	return addr
}

func signExtend(v *Expr, bytes int, arg x86asm.Arg) *Expr {
	if !v.IsConst() {
		return v
	}
	if r, ok := arg.(x86asm.Reg); ok {
		bytes = regBits(r) / 8
	}
	switch bytes {
	case 1:
		return Const(int64(int8(v.Const)))
	case 2:
		return Const(int64(int16(v.Const)))
	case 4:
		return Const(int64(int32(v.Const)))
	}
	return v
}

func isJcc(op x86asm.Op) bool {
	switch op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JNE,
		x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JS, x86asm.JNS:
		return true
	}
	return false
}

// taken decides a conditional branch on the flags.
func (f *flags) taken(op x86asm.Op) (bool, error) {
	if !f.set {
		return false, fmt.Errorf("%w: branch on flags not modelled", ErrUnsupported)
	}
	a, b := f.a, f.b
	if a.IsConst() && b.IsConst() {
		var x int64
		ua, ub := uint64(a.Const), uint64(b.Const)
		if f.test {
			x = a.Const & b.Const
			ua, ub = uint64(x), 0
		} else {
			x = a.Const - b.Const
		}
		sa, sb := a.Const, b.Const
		if f.test {
			sa, sb = x, 0
		}
		switch op {
		case x86asm.JE:
			return x == 0, nil
		case x86asm.JNE:
			return x != 0, nil
		case x86asm.JA:
			return ua > ub, nil
		case x86asm.JAE:
			return ua >= ub, nil
		case x86asm.JB:
			return ua < ub, nil
		case x86asm.JBE:
			return ua <= ub, nil
		case x86asm.JG:
			return sa > sb, nil
		case x86asm.JGE:
			return sa >= sb, nil
		case x86asm.JL:
			return sa < sb, nil
		case x86asm.JLE:
			return sa <= sb, nil
		case x86asm.JS:
			return x < 0, nil
		case x86asm.JNS:
			return x >= 0, nil
		}
	}
	// The fast path: see Run.
	equal := a != nil && b != nil && !a.IsConst() && !b.IsConst() && !f.test
	switch op {
	case x86asm.JE:
		return equal, nil
	case x86asm.JNE:
		return !equal, nil
	}
	return false, fmt.Errorf("%w: %v on unknown values %v, %v", ErrUnsupported, op, a, b)
}
