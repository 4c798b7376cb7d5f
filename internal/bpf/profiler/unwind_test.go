package profiler

import (
	"testing"

	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// TestEncodeRow checks the 8-byte row encoding, and that a rule whose
// offset does not fit is encoded as one the BPF walk stops at, never as a
// wrong offset.
func TestEncodeRow(t *testing.T) {
	const base = 0x401000
	cases := []struct {
		name string
		row  cfi.Row
		want encodedRow
	}{
		{"rsp", cfi.Row{PC: base + 0x10, CFA: cfi.CFARSP, CFAOffset: 8}, encodedRow{PC: 0x10, CFAOff: 8, Rules: 1}},
		{"rbp saved", cfi.Row{PC: base + 0x20, CFA: cfi.CFARBP, CFAOffset: 16, RBP: cfi.RBPAtCFA, RBPOffset: -16},
			encodedRow{PC: 0x20, CFAOff: 16, Rules: 2 | 1<<4, RBPOff: -2}},
		{"plt", cfi.Row{PC: base, CFA: cfi.CFAPLT, CFAOffset: 8}, encodedRow{CFAOff: 8, Rules: 3}},
		{"end", cfi.Row{PC: base + 4, CFA: cfi.CFAEnd}, encodedRow{PC: 4, Rules: 5}},
		{"huge frame", cfi.Row{PC: base, CFA: cfi.CFARSP, CFAOffset: 1 << 20}, encodedRow{Rules: uint8(cfi.CFAUnsupported)}},
		{"rbp far", cfi.Row{PC: base, CFA: cfi.CFARSP, CFAOffset: 64, RBP: cfi.RBPAtCFA, RBPOffset: -8 * 200},
			encodedRow{CFAOff: 64, Rules: 1 | uint8(cfi.RBPUnsupported)<<4}},
		{"rbp unaligned", cfi.Row{PC: base, CFA: cfi.CFARSP, CFAOffset: 64, RBP: cfi.RBPAtCFA, RBPOffset: -12},
			encodedRow{CFAOff: 64, Rules: 1 | uint8(cfi.RBPUnsupported)<<4}},
	}
	for _, c := range cases {
		if got := encodeRow(c.row, base); got != c.want {
			t.Errorf("%s: encodeRow(%+v) = %+v, want %+v", c.name, c.row, got, c.want)
		}
	}
}

// TestRuleValuesMirrorHeader pins the cfi rule values that rows carry
// as-is to the ones bpfcol_unwind.h defines.
func TestRuleValuesMirrorHeader(t *testing.T) {
	cfa := map[cfi.CFARule]uint8{cfi.CFANone: 0, cfi.CFARSP: 1, cfi.CFARBP: 2, cfi.CFAPLT: 3, cfi.CFASignal: 4, cfi.CFAEnd: 5, cfi.CFAUnsupported: 6}
	for r, v := range cfa {
		if uint8(r) != v {
			t.Errorf("cfi CFA rule %d is UNWIND_CFA_* %d in bpfcol_unwind.h", r, v)
		}
	}
	rbp := map[cfi.RBPRule]uint8{cfi.RBPUnchanged: 0, cfi.RBPAtCFA: 1, cfi.RBPUnsupported: 2}
	for r, v := range rbp {
		if uint8(r) != v {
			t.Errorf("cfi RBP rule %d is UNWIND_RBP_* %d in bpfcol_unwind.h", r, v)
		}
	}
}
