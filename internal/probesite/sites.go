package probesite

import (
	"debug/elf"
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
// (see ParseSpec) or "usdt:provider:name", and exit is ExitReturn, a
// function reference or a USDT reference.
//
// Placement follows the measured rules in placement.go: entries move from
// a single-stepped first instruction to the first emulated one of a
// straight-line prologue when provably equivalent; "return" is a uretprobe
// sharing the entry's trap for non-Go code, and per RET an emulated
// instruction just before it, or the RET, for Go code (which must never
// get a uretprobe).
//
// A Go entry is placed after the stack-bound check: a call that grows its
// stack runs the check twice (morestack jumps back to the function's start)
// and would open the scope twice. That move skips a branch, against the
// general rule, because the branch only leaves through morestack, which
// re-enters at the start: the probe after the check fires exactly once per
// call, the one at the start once per stack growth more.
func (b *Binary) PlanProbe(id uint32, entry, exit string) (Plan, error) {
	var plan Plan
	spec, err := ParseSpec(entry)
	if err != nil {
		return plan, err
	}
	if spec.Provider != "" {
		return b.planUSDT(id, spec, exit)
	}
	fn, err := b.Lookup(spec)
	if err != nil {
		return plan, err
	}
	plan.Entry = fn
	code := b.analyse(fn)
	entrySite, note, err := b.entrySite(id, fn, code, spec, entry)
	if err != nil {
		return plan, err
	}
	plan.Sites = append(plan.Sites, entrySite)
	plan.Notes = append(plan.Notes, note)

	if exit == ExitReturn {
		plan.Exit = fn
		sites, note, err := b.returnSites(id, fn, code, spec, entrySite)
		if err != nil {
			return plan, err
		}
		plan.Sites = append(plan.Sites, sites...)
		plan.Notes = append(plan.Notes, note)
		if sites[0].Kind == scopeprobe.ReturnProbe {
			// The kernel hooks only so many returns per thread: the
			// scope programs check, on every site of the probe.
			for i := range plan.Sites {
				plan.Sites[i].ReturnProbeExit = true
			}
		}
		return plan, nil
	}

	exitSpec, err := ParseSpec(exit)
	if err != nil {
		return plan, err
	}
	if exitSpec.Provider != "" {
		sites, err := b.usdtSites(id, exitSpec, scopeprobe.Exit, fn.Go)
		if err != nil {
			return plan, fmt.Errorf("exit: %w", err)
		}
		plan.Sites = append(plan.Sites, sites...)
		plan.Notes = append(plan.Notes, fmt.Sprintf("exit at %d USDT site(s) of %s:%s", len(sites), exitSpec.Provider, exitSpec.Name))
		return plan, nil
	}
	exitFn, err := b.Lookup(exitSpec)
	if err != nil {
		return plan, fmt.Errorf("exit: %w", err)
	}
	if exitFn.Go != fn.Go {
		return plan, fmt.Errorf("entry %s and exit %s: one is Go code and the other is not, so their scopes cannot be matched", fn.Name, exitFn.Name)
	}
	plan.Exit = exitFn
	exitSite, note, err := b.entrySite(id, exitFn, b.analyse(exitFn), exitSpec, exit)
	if err != nil {
		return plan, err
	}
	exitSite.Kind = scopeprobe.Exit
	plan.Sites = append(plan.Sites, exitSite)
	plan.Notes = append(plan.Notes, "exit "+note)
	return plan, nil
}

// functionCode is a function's decoded machine code, or why there is none.
type functionCode struct {
	insts    []instruction
	targets  map[uint64]bool
	indirect bool
	err      error
}

// analyse decodes fn whole. Failing is not fatal to an entry probe (it
// stays where it was asked for), only to placements that need the code.
func (b *Binary) analyse(fn Function) *functionCode {
	if fn.End <= fn.Start {
		return &functionCode{err: fmt.Errorf("%s: unknown size, cannot decode it", fn.Name)}
	}
	code, err := b.code(fn.Start, fn.End)
	if err != nil {
		return &functionCode{err: err}
	}
	insts, err := decodeAll(code, b.elf.Machine)
	if err != nil {
		return &functionCode{err: fmt.Errorf("%s: %w", fn.Name, err)}
	}
	c := &functionCode{insts: insts}
	c.targets, c.indirect = branchTargets(insts)
	return c
}

// entryOffset is where a probe meant to fire once per call of fn goes,
// relative to fn.Start: after Go's stack check, then moved to an emulated
// instruction by placeEntry. An explicit offset in spec is kept as given.
func (b *Binary) entryOffset(fn Function, code *functionCode, spec Spec) (uint64, string, error) {
	if spec.Offset != 0 {
		return spec.Offset, fmt.Sprintf("entry at +%#x as configured", spec.Offset), nil
	}
	from := uint64(0)
	goNote := ""
	if fn.Go {
		after, err := b.AfterStackCheck(fn)
		if err != nil {
			return 0, "", err
		}
		from = after - fn.Start
		if from != 0 {
			goNote = fmt.Sprintf("after the stack-bound check at +%#x; ", from)
		}
	}
	if code.err != nil {
		return from, fmt.Sprintf("%sentry kept at +%#x: %v", goNote, from, code.err), nil
	}
	off, note := placeEntry(fn, code.insts, from)
	return off, goNote + note, nil
}

// entrySite places a probe that fires once per call of fn.
func (b *Binary) entrySite(id uint32, fn Function, code *functionCode, spec Spec, ref string) (scopeprobe.Site, string, error) {
	rel, note, err := b.entryOffset(fn, code, spec)
	if err != nil {
		return scopeprobe.Site{}, "", err
	}
	// Compared as offsets: an address sum could wrap around below the
	// function (main+0xffffffffffffffff is main-1).
	if (fn.End > fn.Start && rel >= fn.End-fn.Start) || fn.Start+rel < fn.Start {
		return scopeprobe.Site{}, "", fmt.Errorf("%s: offset %#x is past the function's end", ref, spec.Offset)
	}
	if err := checkBoundary(code, spec.Offset); err != nil {
		return scopeprobe.Site{}, "", fmt.Errorf("%s: %w", ref, err)
	}
	off, err := b.FileOffset(fn.Start + rel)
	if err != nil {
		return scopeprobe.Site{}, "", err
	}
	return scopeprobe.Site{Kind: scopeprobe.Entry, Offset: off, Symbol: siteName(fn, rel), ProbeID: id, ScopeByGoroutine: fn.Go},
		fn.Name + ": " + note, nil
}

// checkBoundary refuses an explicit offset inside an instruction of the
// decoded code. The kernel accepts any byte whose own decoding it can
// emulate or single-step, but the CPU still runs the instruction the byte
// belongs to, with the breakpoint as one of its bytes: the program then
// computes wrong values or crashes instead of trapping.
func checkBoundary(code *functionCode, off uint64) error {
	if off == 0 || code.err != nil {
		return nil
	}
	if _, ok := findInstruction(code.insts, off); ok {
		return nil
	}
	for i := range code.insts {
		in := &code.insts[i]
		if in.off < off && off < in.end() {
			return fmt.Errorf("offset %#x is inside the instruction at +%#x (%d bytes), not at its start: a uprobe there would change what the program runs", off, in.off, in.len)
		}
	}
	return nil
}

func siteName(fn Function, rel uint64) string {
	if rel == 0 {
		return fn.Name
	}
	return fmt.Sprintf("%s+%#x", fn.Name, rel)
}

// returnSites places the sites closing a scope when fn returns.
func (b *Binary) returnSites(id uint32, fn Function, code *functionCode, spec Spec, entry scopeprobe.Site) ([]scopeprobe.Site, string, error) {
	if !fn.Go {
		// The uretprobe goes on fn's own placed entry, which leaves the
		// stack untouched, so the return address is still on top there.
		site := entry
		if spec.Offset != 0 {
			rel, _, err := b.entryOffset(fn, code, Spec{})
			if err != nil {
				return nil, "", err
			}
			if site.Offset, err = b.FileOffset(fn.Start + rel); err != nil {
				return nil, "", err
			}
			site.Symbol = siteName(fn, rel)
		}
		site.Kind = scopeprobe.ReturnProbe
		site.ScopeByGoroutine = false
		return []scopeprobe.Site{site}, fmt.Sprintf("%s: exit by uretprobe at %s", fn.Name, site.Symbol), nil
	}
	if code.err != nil {
		return nil, "", code.err
	}
	var sites []scopeprobe.Site
	moved := 0
	for i := range code.insts {
		if !code.insts[i].ret {
			continue
		}
		rel, before := placeReturn(code.insts, i, code.targets, code.indirect)
		if before {
			moved++
		}
		off, err := b.FileOffset(fn.Start + rel)
		if err != nil {
			return nil, "", err
		}
		sites = append(sites, scopeprobe.Site{
			Kind: scopeprobe.Exit, Offset: off, Symbol: siteName(fn, rel), ProbeID: id, ScopeByGoroutine: fn.Go,
		})
	}
	if len(sites) == 0 {
		return nil, "", fmt.Errorf("%s: %w", fn.Name, ErrNoReturn)
	}
	return sites, fmt.Sprintf("%s: exit at %d RET(s) of Go code, %d of them on an emulated instruction just before the RET",
		fn.Name, len(sites), moved), nil
}

// AfterStackCheck returns the address of the instruction after Go's
// stack-bound check ("CMP SP or a register, 16(R14); JBE morestack" on
// x86-64, "MOVD 16(R28), R16 ... BLS morestack" on arm64), or fn.Start
// when the function has none (NOSPLIT and small leaves).
func (b *Binary) AfterStackCheck(fn Function) (uint64, error) {
	end := min(fn.End, fn.Start+maxPrologue*15)
	if end <= fn.Start {
		return fn.Start, nil
	}
	code, err := b.code(fn.Start, end)
	if err != nil {
		return 0, err
	}
	if b.elf.Machine == elf.EM_AARCH64 {
		return fn.Start + afterStackCheckA64(code), nil
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

// ErrNoReturn reports a function without a RET instruction (it ends in a
// tail call or never returns), whose return cannot be probed.
var ErrNoReturn = errors.New("no RET instruction")
