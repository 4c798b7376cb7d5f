package profiler

import (
	"os"
	"regexp"
	"strconv"
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
		{"rsp", cfi.Row{PC: base + 0x10, CFA: cfi.CFASP, CFAOffset: 8}, encodedRow{PC: 0x10, CFAOff: 8, Rules: 1}},
		{"rbp saved", cfi.Row{PC: base + 0x20, CFA: cfi.CFAFP, CFAOffset: 16, FP: cfi.FPAtCFA, FPOffset: -16},
			encodedRow{PC: 0x20, CFAOff: 16, Rules: 2 | 1<<4, FPOff: -2}},
		{"plt", cfi.Row{PC: base, CFA: cfi.CFAPLT, CFAOffset: 8}, encodedRow{CFAOff: 8, Rules: 3}},
		{"end", cfi.Row{PC: base + 4, CFA: cfi.CFAEnd}, encodedRow{PC: 4, Rules: 5}},
		{"huge frame", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 1 << 20}, encodedRow{Rules: uint8(cfi.CFAUnsupported)}},
		{"rbp far", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 64, FP: cfi.FPAtCFA, FPOffset: -8 * 200},
			encodedRow{CFAOff: 64, Rules: 1 | uint8(cfi.FPUnsupported)<<4}},
		{"rbp unaligned", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 64, FP: cfi.FPAtCFA, FPOffset: -12},
			encodedRow{CFAOff: 64, Rules: 1 | uint8(cfi.FPUnsupported)<<4}},
		// arm64's return address rules.
		{"in x30", cfi.Row{PC: base, CFA: cfi.CFASP, RA: cfi.RAInLink}, encodedRow{Rules: 1 | raInLink<<6}},
		{"frame record at the top", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 16, FP: cfi.FPAtCFA, FPOffset: -16},
			encodedRow{CFAOff: 16, Rules: 1 | 1<<4, FPOff: -2}},
		{"frame record lower", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 48, FP: cfi.FPAtCFA, FPOffset: -48, RA: cfi.RAAtCFA, RAOffset: -40},
			encodedRow{CFAOff: 48, Rules: 1 | 1<<4 | raAboveFP<<6, FPOff: -6}},
		{"x30 alone", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 32, RA: cfi.RAAtCFA, RAOffset: -16},
			encodedRow{CFAOff: 32, Rules: 1 | raAtOff<<6, FPOff: -2}},
		{"x30 apart from x29", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 64, FP: cfi.FPAtCFA, FPOffset: -64, RA: cfi.RAAtCFA, RAOffset: -16},
			encodedRow{CFAOff: 64, Rules: 1 | uint8(cfi.FPUnsupported)<<4 | raAtOff<<6, FPOff: -2}},
		{"x30 far", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 64, RA: cfi.RAAtCFA, RAOffset: -8 * 300},
			encodedRow{CFAOff: 64, Rules: uint8(cfi.CFAUnsupported)}},
		// Wide arm64 frames: the slots counted from SP.
		{"x30 at the bottom of a wide frame", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 2416, RA: cfi.RAAtCFA, RAOffset: -2408},
			encodedRow{CFAOff: 2416, Rules: 1 | slotsAtSP | raAtOff<<6, FPOff: 1}},
		{"frame record at the bottom of a wide frame", cfi.Row{PC: base, CFA: cfi.CFASP, CFAOffset: 2416, FP: cfi.FPAtCFA, FPOffset: -2416, RA: cfi.RAAtCFA, RAOffset: -2408},
			encodedRow{CFAOff: 2416, Rules: 1 | slotsAtSP | 1<<4 | raAboveFP<<6, FPOff: 0}},
		{"wide frame on x29", cfi.Row{PC: base, CFA: cfi.CFAFP, CFAOffset: 2416, RA: cfi.RAAtCFA, RAOffset: -2408},
			encodedRow{CFAOff: 2416, Rules: uint8(cfi.CFAUnsupported)}},
	}
	for _, c := range cases {
		if got := encodeRow(c.row, base); got != c.want {
			t.Errorf("%s: encodeRow(%+v) = %+v, want %+v", c.name, c.row, got, c.want)
		}
	}
}

// TestRuleValuesMirrorHeader pins the rule values rows carry to the ones
// bpfcol_unwind.h defines: the cfi rules that rows carry as they are, and
// the packed return address rules.
func TestRuleValuesMirrorHeader(t *testing.T) {
	src, err := os.ReadFile("../c/include/bpfcol_unwind.h")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]uint8{}
	for _, m := range regexp.MustCompile(`(?m)^#define (UNWIND_(?:CFA|FP|RA|SLOTS)_[A-Z_]+) (\d+)`).FindAllStringSubmatch(string(src), -1) {
		v, _ := strconv.Atoi(m[2])
		defined[m[1]] = uint8(v)
	}
	want := map[string]uint8{
		"UNWIND_CFA_NONE": uint8(cfi.CFANone), "UNWIND_CFA_SP": uint8(cfi.CFASP), "UNWIND_CFA_FP": uint8(cfi.CFAFP),
		"UNWIND_CFA_PLT": uint8(cfi.CFAPLT), "UNWIND_CFA_SIGNAL": uint8(cfi.CFASignal), "UNWIND_CFA_END": uint8(cfi.CFAEnd),
		"UNWIND_CFA_UNSUPPORTED": uint8(cfi.CFAUnsupported),
		"UNWIND_FP_UNCHANGED":    uint8(cfi.FPUnchanged), "UNWIND_FP_AT_CFA": uint8(cfi.FPAtCFA), "UNWIND_FP_UNSUPPORTED": uint8(cfi.FPUnsupported),
		"UNWIND_RA_CALL_SLOT": raCallSlot, "UNWIND_RA_IN_LINK": raInLink, "UNWIND_RA_ABOVE_FP": raAboveFP, "UNWIND_RA_AT_OFF": raAtOff,
		"UNWIND_SLOTS_AT_SP": slotsAtSP,
	}
	for name, v := range want {
		got, ok := defined[name]
		if !ok || got != v {
			t.Errorf("%s: Go's value %d, bpfcol_unwind.h's %d (defined: %v)", name, v, got, ok)
		}
	}
	if len(defined) != len(want) {
		t.Errorf("bpfcol_unwind.h defines %d rule values, Go mirrors %d: %v", len(defined), len(want), defined)
	}
}
