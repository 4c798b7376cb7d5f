package probesite

import (
	"errors"
	"fmt"

	"golang.org/x/arch/x86/x86asm"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
)

// ExitReturn is the exit of a probe that closes its scope when the entry
// function itself returns.
const ExitReturn = "return"

// maxPrologue bounds how many instructions are decoded looking for Go's
// stack-bound check.
const maxPrologue = 8

// Plan is where one probe's uprobes go in one binary.
type Plan struct {
	// Sites are the uprobes, entries first.
	Sites []scopeprobe.Site
	// Entry and Exit are the functions found.
	Entry, Exit Function
	// Notes explain placement choices, for a log line per binary.
	Notes []string
}

// PlanProbe places the sites of probe id: entry is a function reference
// (see ParseSpec) and exit is ExitReturn or another function reference.
//
// Go code never gets a uretprobe: its exits are uprobes on every RET of the
// function. Other code gets a uretprobe for "return" for now; placement
// by measured cost is the fast-uprobes work. A Go entry is placed after the
// stack-bound check, because a call that grows its stack runs that check
// twice (morestack jumps back to the function's start) and would open the
// scope twice.
func (b *Binary) PlanProbe(id uint32, entry, exit string) (Plan, error) {
	var plan Plan
	spec, err := ParseSpec(entry)
	if err != nil {
		return plan, err
	}
	fn, err := b.Lookup(spec)
	if err != nil {
		return plan, err
	}
	plan.Entry = fn
	entrySite, note, err := b.entrySite(id, fn, spec, entry)
	if err != nil {
		return plan, err
	}
	plan.Sites = append(plan.Sites, entrySite)
	if note != "" {
		plan.Notes = append(plan.Notes, note)
	}

	if exit == ExitReturn {
		plan.Exit = fn
		if !fn.Go {
			off, err := b.FileOffset(fn.Start)
			if err != nil {
				return plan, err
			}
			plan.Sites = append(plan.Sites, scopeprobe.Site{
				Kind: scopeprobe.ReturnProbe, Offset: off, Symbol: fn.Name, ProbeID: id,
			})
			return plan, nil
		}
		rets, err := b.ReturnAddresses(fn)
		if err != nil {
			return plan, err
		}
		for _, r := range rets {
			off, err := b.FileOffset(r)
			if err != nil {
				return plan, err
			}
			plan.Sites = append(plan.Sites, scopeprobe.Site{
				Kind: scopeprobe.Exit, Offset: off, Symbol: fmt.Sprintf("%s+%#x", fn.Name, r-fn.Start),
				ProbeID: id, ScopeByGoroutine: true,
			})
		}
		return plan, nil
	}

	exitSpec, err := ParseSpec(exit)
	if err != nil {
		return plan, err
	}
	exitFn, err := b.Lookup(exitSpec)
	if err != nil {
		return plan, fmt.Errorf("exit: %w", err)
	}
	if exitFn.Go != fn.Go {
		return plan, fmt.Errorf("entry %s and exit %s: one is Go code and the other is not, so their scopes cannot be matched", fn.Name, exitFn.Name)
	}
	plan.Exit = exitFn
	exitSite, note, err := b.entrySite(id, exitFn, exitSpec, exit)
	if err != nil {
		return plan, err
	}
	exitSite.Kind = scopeprobe.Exit
	plan.Sites = append(plan.Sites, exitSite)
	if note != "" {
		plan.Notes = append(plan.Notes, note)
	}
	return plan, nil
}

// entrySite places a probe that fires once per call of fn: at the given
// offset, or for Go after the stack-bound check.
func (b *Binary) entrySite(id uint32, fn Function, spec Spec, ref string) (scopeprobe.Site, string, error) {
	addr := fn.Start + spec.Offset
	note := ""
	if spec.Offset == 0 && fn.Go {
		after, err := b.AfterStackCheck(fn)
		if err != nil {
			return scopeprobe.Site{}, "", err
		}
		if after != fn.Start {
			note = fmt.Sprintf("%s: entry probe after the stack-bound check at +%#x", fn.Name, after-fn.Start)
		}
		addr = after
	}
	if fn.End > fn.Start && addr >= fn.End {
		return scopeprobe.Site{}, "", fmt.Errorf("%s: offset %#x is past the function's end", ref, spec.Offset)
	}
	off, err := b.FileOffset(addr)
	if err != nil {
		return scopeprobe.Site{}, "", err
	}
	name := fn.Name
	if addr != fn.Start {
		name = fmt.Sprintf("%s+%#x", fn.Name, addr-fn.Start)
	}
	return scopeprobe.Site{Kind: scopeprobe.Entry, Offset: off, Symbol: name, ProbeID: id, ScopeByGoroutine: fn.Go}, note, nil
}

// AfterStackCheck returns the address of the instruction after Go's
// stack-bound check ("CMP SP or a register, 16(R14); JBE morestack"), or
// fn.Start when the function has none (NOSPLIT and small leaves).
func (b *Binary) AfterStackCheck(fn Function) (uint64, error) {
	end := min(fn.End, fn.Start+maxPrologue*15)
	if end <= fn.Start {
		return fn.Start, nil
	}
	code, err := b.code(fn.Start, end)
	if err != nil {
		return 0, err
	}
	comparedG := false
	for off, n := 0, 0; off < len(code) && n < maxPrologue; n++ {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			return fn.Start, nil
		}
		off += inst.Len
		switch inst.Op {
		case x86asm.CMP:
			for _, a := range inst.Args {
				if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.R14 {
					comparedG = true
				}
			}
		case x86asm.JBE:
			if comparedG {
				return fn.Start + uint64(off), nil
			}
			return fn.Start, nil
		case x86asm.RET, x86asm.JMP, x86asm.CALL:
			return fn.Start, nil
		}
	}
	return fn.Start, nil
}

// ReturnAddresses decodes fn from its start to its end and returns the
// address of every RET instruction. Decoding must succeed throughout:
// a uprobe in the middle of an instruction would corrupt the program.
func (b *Binary) ReturnAddresses(fn Function) ([]uint64, error) {
	if fn.End <= fn.Start {
		return nil, fmt.Errorf("%s: unknown size, cannot find its RET instructions", fn.Name)
	}
	code, err := b.code(fn.Start, fn.End)
	if err != nil {
		return nil, err
	}
	var rets []uint64
	for off := 0; off < len(code); {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			// Trailing INT3 padding decodes; anything else is not code we
			// can safely probe.
			return nil, fmt.Errorf("%s: decoding instruction at +%#x: %w", fn.Name, off, err)
		}
		if inst.Op == x86asm.RET {
			rets = append(rets, fn.Start+uint64(off))
		}
		off += inst.Len
	}
	if len(rets) == 0 {
		return nil, fmt.Errorf("%s: %w", fn.Name, ErrNoReturn)
	}
	return rets, nil
}

// ErrNoReturn reports a function without a RET instruction (it ends in a
// tail call or never returns), whose return cannot be probed.
var ErrNoReturn = errors.New("no RET instruction")
