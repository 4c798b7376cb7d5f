//go:build linux && amd64

package profiler

import (
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// TestWriteUnwindRowsRoundTrip writes rows across page boundaries at an
// unaligned index and reads them back through the map: each row encoded
// where it belongs, and the rows on either side untouched.
func TestWriteUnwindRowsRoundTrip(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{Frequency: 1, UnwindRows: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const base, first, count = 0x400000, 509, 1200 // rows 509-1708: pages 0-3 of 8-byte rows
	rows := make([]cfi.Row, count)
	for i := range rows {
		rows[i] = cfi.Row{PC: base + uint64(i)*3, CFA: cfi.CFARSP, CFAOffset: int32(8 + i%64*8), RBP: cfi.RBPAtCFA, RBPOffset: -16}
	}
	if err := s.WriteUnwindRows(first, rows, base); err != nil {
		t.Fatal(err)
	}
	for i := first - 1; i <= first+count; i++ {
		var got profilerUnwindRow
		if err := s.objs.UnwindRows.Lookup(uint32(i), &got); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		var want profilerUnwindRow
		if i >= first && i < first+count {
			e := encodeRow(rows[i-first], base)
			want = profilerUnwindRow{Pc: e.PC, CfaOff: e.CFAOff, Rules: e.Rules, RbpOff: e.RBPOff}
			if want.Pc != uint32(i-first)*3 || want.Rules == 0 {
				t.Fatalf("row %d encodes to %+v", i, want)
			}
		}
		if got != want {
			t.Fatalf("row %d: got %+v, want %+v", i, got, want)
		}
	}
	if err := s.WriteUnwindRows(4096-10, rows[:11], base); err == nil {
		t.Fatal("writing past the store's end: want an error")
	}
}
