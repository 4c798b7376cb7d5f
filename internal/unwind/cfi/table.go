// Package cfi compiles the call frame information of an x86-64 ELF file
// (.eh_frame, and .debug_frame where that lacks coverage) into a compact,
// sorted unwind table: for every address range, how to find the canonical
// frame address (CFA), where the return address is (always CFA-8 on
// x86-64) and how the caller's RBP is restored.
//
// FromELF (or EHFrame and DebugFrame, joined with Table.Fill) compiles a
// file; a Store builds tables off the hot path, once per file, bounded in
// bytes, completing them from separate debug files.
//
// The table is what the BPF unwinder walks; the encoding into BPF map
// values lives with the BPF loader, not here.
package cfi

import "strconv"

// CFARule says how the CFA of a frame is computed at an address.
type CFARule uint8

const (
	// CFANone marks an address range with no CFI: the unwinder falls back
	// to the frame pointer there.
	CFANone CFARule = iota
	// CFARSP is CFA = RSP + CFAOffset.
	CFARSP
	// CFARBP is CFA = RBP + CFAOffset.
	CFARBP
	// CFAPLT is the expression linkers emit for PLT entries:
	// CFA = RSP + CFAOffset + ((RIP & 15) >= Row.PLTThreshold ? 8 : 0).
	// The threshold is where, inside a 16-byte entry, the push of the
	// relocation index has happened: 11 for the classic lazy PLT
	// (jmp *GOT; push; jmp PLT0), 10 for the IBT/BND layouts.
	CFAPLT
	// CFASignal is a signal trampoline (__restore_rt): the interrupted
	// registers are in the ucontext at RSP.
	CFASignal
	// CFAEnd marks the outermost frame: the return address is undefined
	// (glibc's _start, clone3/thread start). The stack is complete here.
	CFAEnd
	// CFAUnsupported is CFI that exists but that the unwinder cannot
	// follow (an unknown expression, a register other than RSP/RBP).
	CFAUnsupported
)

// RBPRule says how the caller's RBP is restored.
type RBPRule uint8

const (
	// RBPUnchanged: RBP still holds the caller's value.
	RBPUnchanged RBPRule = iota
	// RBPAtCFA: the caller's RBP is saved in memory at CFA + RBPOffset.
	RBPAtCFA
	// RBPUnsupported: restored some other way; the unwinder treats RBP as
	// unknown from here on.
	RBPUnsupported
)

// Row is the unwind rule from PC up to the next row's PC.
type Row struct {
	// PC is the ELF virtual address (not a file offset, not a runtime
	// address) where the rule starts to apply.
	PC uint64
	// CFA and CFAOffset give the CFA (see CFARule). Only CFARSP, CFARBP
	// and CFAPLT use CFAOffset; it is zero otherwise.
	CFAOffset int32
	// RBP and RBPOffset give the caller's RBP (see RBPRule). Only
	// RBPAtCFA uses RBPOffset; it is zero otherwise. Rows whose CFA rule
	// is not CFARSP, CFARBP or CFAPLT always hold RBPUnchanged.
	RBPOffset int32
	CFA       CFARule
	RBP       RBPRule
	// PLTThreshold is the (RIP & 15) bound of a CFAPLT row, zero otherwise.
	PLTThreshold uint8
}

// Table is a file's compiled unwind table. Rows are sorted by PC, and
// adjacent rows never hold the same rule. A range with no CFI between two
// functions is a CFANone row, so a lookup never stretches a function's
// last rule over its neighbour.
type Table struct {
	Rows []Row
}

var cfaRuleNames = [...]string{
	CFANone: "none", CFARSP: "rsp", CFARBP: "rbp", CFAPLT: "plt",
	CFASignal: "signal", CFAEnd: "end", CFAUnsupported: "unsupported",
}

// String names the rule.
func (r CFARule) String() string {
	if int(r) < len(cfaRuleNames) {
		return cfaRuleNames[r]
	}
	return "CFARule(" + strconv.Itoa(int(r)) + ")"
}

var rbpRuleNames = [...]string{RBPUnchanged: "unchanged", RBPAtCFA: "at-cfa", RBPUnsupported: "unsupported"}

// String names the rule.
func (r RBPRule) String() string {
	if int(r) < len(rbpRuleNames) {
		return rbpRuleNames[r]
	}
	return "RBPRule(" + strconv.Itoa(int(r)) + ")"
}
