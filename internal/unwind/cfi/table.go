// Package cfi compiles the call frame information of an x86-64 or arm64
// ELF file (.eh_frame, and .debug_frame where that lacks coverage) into a
// compact, sorted unwind table: for every address range, how to find the
// canonical frame address (CFA), where the return address is (CFA-8 on
// x86-64; on arm64 in the link register x30 or saved in the frame) and how
// the caller's frame pointer (RBP, x29) is restored.
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
	// CFASP is CFA = SP + CFAOffset.
	CFASP
	// CFAFP is CFA = FP (RBP, x29) + CFAOffset.
	CFAFP
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
	// follow (an unknown expression, a register other than SP/FP).
	CFAUnsupported
)

// FPRule says how the caller's frame pointer (RBP, x29) is restored.
type FPRule uint8

const (
	// FPUnchanged: the frame pointer still holds the caller's value.
	FPUnchanged FPRule = iota
	// FPAtCFA: the caller's frame pointer is saved in memory at CFA +
	// FPOffset.
	FPAtCFA
	// FPUnsupported: restored some other way; the unwinder treats the
	// frame pointer as
	// unknown from here on.
	FPUnsupported
)

// RARule says where the return address into the caller is.
type RARule uint8

const (
	// RACallSlot: at CFA-8, where x86-64's call pushed it. On arm64 it
	// is where the usual frame record (x29, x30 stored at the top of the
	// frame) keeps it.
	RACallSlot RARule = iota
	// RAInLink: still in the link register (arm64's x30), as in a leaf
	// that never saves it or in a prologue before the save. Only the
	// interrupted frame (or one a signal frame restores) can follow it.
	RAInLink
	// RAAtCFA: saved at CFA + RAOffset (an arm64 frame record lower in
	// the frame, or x30 saved alone).
	RAAtCFA
)

// Row is the unwind rule from PC up to the next row's PC.
type Row struct {
	// PC is the ELF virtual address (not a file offset, not a runtime
	// address) where the rule starts to apply.
	PC uint64
	// CFA and CFAOffset give the CFA (see CFARule). Only CFASP, CFAFP
	// and CFAPLT use CFAOffset; it is zero otherwise.
	CFAOffset int32
	// FP and FPOffset give the caller's frame pointer (see FPRule).
	// Only FPAtCFA uses FPOffset; it is zero otherwise. Rows whose CFA
	// rule is not CFASP, CFAFP or CFAPLT always hold FPUnchanged.
	FPOffset int32
	CFA      CFARule
	FP       FPRule
	// RA and RAOffset give the return address (see RARule). Only RAAtCFA
	// uses RAOffset; it is zero otherwise.
	RA       RARule
	RAOffset int32
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
	CFANone: "none", CFASP: "sp", CFAFP: "fp", CFAPLT: "plt",
	CFASignal: "signal", CFAEnd: "end", CFAUnsupported: "unsupported",
}

// String names the rule.
func (r CFARule) String() string {
	if int(r) < len(cfaRuleNames) {
		return cfaRuleNames[r]
	}
	return "CFARule(" + strconv.Itoa(int(r)) + ")"
}

var fpRuleNames = [...]string{FPUnchanged: "unchanged", FPAtCFA: "at-cfa", FPUnsupported: "unsupported"}

var raRuleNames = [...]string{RACallSlot: "call-slot", RAInLink: "in-link", RAAtCFA: "at-cfa"}

// String names the rule.
func (r RARule) String() string {
	if int(r) < len(raRuleNames) {
		return raRuleNames[r]
	}
	return "RARule(" + strconv.Itoa(int(r)) + ")"
}

// String names the rule.
func (r FPRule) String() string {
	if int(r) < len(fpRuleNames) {
		return fpRuleNames[r]
	}
	return "FPRule(" + strconv.Itoa(int(r)) + ")"
}
