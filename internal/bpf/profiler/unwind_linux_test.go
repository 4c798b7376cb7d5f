//go:build linux && (amd64 || arm64)

package profiler

import (
	"maps"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// TestWriteUnwindRowsRoundTrip writes rows across page boundaries at an
// unaligned index and reads them back through the map: each row encoded
// where it belongs, the index after them, and the slots on either side
// untouched.
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
		rows[i] = cfi.Row{PC: base + uint64(i)*3, CFA: cfi.CFASP, CFAOffset: int32(8 + i%64*8), FP: cfi.FPAtCFA, FPOffset: -16}
	}
	if err := s.WriteUnwindRows(first, rows, base); err != nil {
		t.Fatal(err)
	}
	table := LayOutUnwindTable(rows, base)
	if table.Slots <= count {
		t.Fatalf("a table of %d rows takes %d slots: no room for its index", count, table.Slots)
	}
	var entries []uint32
	for i := first - 1; i <= first+int(table.Slots); i++ {
		var got profilerUnwindRow
		if err := s.objs.UnwindRows.Lookup(uint32(i), &got); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if i >= first+count && i < first+int(table.Slots) {
			entries = append(entries, got.Pc, uint32(uint16(got.CfaOff))|uint32(got.Rules)<<16|uint32(uint8(got.FpOff))<<24)
			continue
		}
		var want profilerUnwindRow
		if i >= first && i < first+count {
			e := encodeRow(rows[i-first], base)
			want = profilerUnwindRow{Pc: e.PC, CfaOff: e.CFAOff, Rules: e.Rules, FpOff: e.FPOff}
			if want.Pc != uint32(i-first)*3 || want.Rules == 0 {
				t.Fatalf("row %d encodes to %+v", i, want)
			}
		}
		if got != want {
			t.Fatalf("row %d: got %+v, want %+v", i, got, want)
		}
	}
	// Rows 3 bytes apart: entry g is the row at or before g<<shift.
	for g := range table.Index.Granules + 1 {
		want := min(uint32((uint64(g)<<table.Index.Shift)/3), count-1)
		if entries[g] != want {
			t.Fatalf("index entry %d (granules of 2^%d bytes) is row %d, want %d", g, table.Index.Shift, entries[g], want)
		}
	}
	if err := s.WriteUnwindRows(4096-10, rows[:11], base); err == nil {
		t.Fatal("writing past the store's end: want an error")
	}
}

// TestUnwindFileUseReadsEveryFile fills unwind_files with more files than
// one batch returns and checks UnwindFileUse against the map read one key
// at a time: every file, with its own stamp.
func TestUnwindFileUseReadsEveryFile(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{Frequency: 1, UnwindRows: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const files = 3*unwindFileUseBatch + 7
	for i := range uint64(files) {
		k := profilerUnwindFileKey{Dev: uint32(i % 3), Ino: 1000 + i}
		v := profilerUnwindFile{State: uint32(FileCFI), Used: uint32(i * 7)}
		if err := s.objs.UnwindFiles.Update(&k, &v, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.UnwindFileUse()
	if err != nil {
		t.Fatal(err)
	}
	want := map[process.FileKey]uint32{}
	var k profilerUnwindFileKey
	var v profilerUnwindFile
	for it := s.objs.UnwindFiles.Iterate(); it.Next(&k, &v); {
		want[process.KernelFileKey(k.Dev, k.Ino)] = v.Used
	}
	if len(want) != files {
		t.Fatalf("the map holds %d files, want %d", len(want), files)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("UnwindFileUse returned %d files, the map holds %d (or their stamps differ)", len(got), len(want))
	}
	// The batched read itself, not its fall-back, on this kernel.
	batched := map[process.FileKey]uint32{}
	if err := s.unwindFileUseBatched(batched); err != nil {
		t.Fatalf("batch lookup: %v", err)
	}
	if !maps.Equal(batched, want) {
		t.Fatalf("the batches returned %d files, the map holds %d (or their stamps differ)", len(batched), len(want))
	}
}

// TestStopReasonsAreTheKernelSide checks StopReason against enum
// unwind_stop as bpf2go generated it: a reason added or moved in C
// without Go would name the wrong stop in the walk metrics.
func TestStopReasonsAreTheKernelSide(t *testing.T) {
	for _, c := range []struct {
		goSide StopReason
		cSide  profilerUnwindStop
	}{
		{StopComplete, profilerUnwindStopUNWIND_STOP_COMPLETE},
		{StopNoTable, profilerUnwindStopUNWIND_STOP_NO_TABLE},
		{StopNoCFI, profilerUnwindStopUNWIND_STOP_NO_CFI},
		{StopBadCFA, profilerUnwindStopUNWIND_STOP_BAD_CFA},
		{StopReadFault, profilerUnwindStopUNWIND_STOP_READ_FAULT},
		{StopDepthLimit, profilerUnwindStopUNWIND_STOP_DEPTH_LIMIT},
		{StopUnsupported, profilerUnwindStopUNWIND_STOP_UNSUPPORTED},
		{StopOutsideMappings, profilerUnwindStopUNWIND_STOP_OUTSIDE_MAPPINGS},
		{StopFramePointerEnd, profilerUnwindStopUNWIND_STOP_FP_END},
		{StopUretprobe, profilerUnwindStopUNWIND_STOP_URETPROBE},
		{NumStopReasons, profilerUnwindStopUNWIND_STOP_MAX},
	} {
		if int(c.goSide) != int(c.cSide) {
			t.Errorf("%v is %d in Go, %d in C", c.goSide, c.goSide, c.cSide)
		}
	}
	if int(flagStopMask)+1 < int(NumStopReasons) {
		t.Errorf("the flags hold a stop reason in %d values, there are %d", flagStopMask+1, NumStopReasons)
	}
}
