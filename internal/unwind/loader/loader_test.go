package loader

import (
	"debug/elf"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// TestFileOffsetRowsOneDelta: with every executable segment at the same
// address-to-offset delta, the rows stay as they are and their base is
// their first PC's file offset. The layout is rustc's: the read-only
// segment ends inside the page where the code segment starts, at another
// delta, which must not matter.
func TestFileOffsetRowsOneDelta(t *testing.T) {
	segs := elfbin.NewAddressMapper([]*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R, Off: 0, Vaddr: 0, Filesz: 0x12840, Memsz: 0x12840}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x12840, Vaddr: 0x13840, Filesz: 0x3e000, Memsz: 0x3e000}},
	})
	rows := []cfi.Row{{PC: 0x13900, CFA: cfi.CFASP, CFAOffset: 8}, {PC: 0x13a00, CFA: cfi.CFANone}}
	got, base, ok := fileOffsetRows(rows, segs)
	if !ok || &got[0] != &rows[0] || base != 0x12900 {
		t.Fatalf("rows moved or base %#x (%v), want the rows as they are at file offset 0x12900", base, ok)
	}
}

// TestFileOffsetRowsTwoDeltas: executable segments at different deltas
// move each row by its own, in file order; rows in no executable segment
// go.
func TestFileOffsetRowsTwoDeltas(t *testing.T) {
	segs := elfbin.NewAddressMapper([]*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x1000, Vaddr: 0x401000, Memsz: 0x1000}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x3000, Vaddr: 0x900000, Memsz: 0x1000}},
	})
	rows := []cfi.Row{
		{PC: 0x401010, CFA: cfi.CFASP, CFAOffset: 8},
		{PC: 0x402000, CFA: cfi.CFANone}, // the first segment's end
		{PC: 0x500000, CFA: cfi.CFASP, CFAOffset: 16},
		{PC: 0x900100, CFA: cfi.CFASP, CFAOffset: 24},
	}
	got, base, ok := fileOffsetRows(rows, segs)
	want := []uint64{0x1010, 0x2000, 0x3100}
	if !ok || base != 0x1010 || len(got) != len(want) {
		t.Fatalf("got %+v base %#x (%v), want PCs %#x", got, base, ok, want)
	}
	for i, pc := range want {
		if got[i].PC != pc {
			t.Fatalf("row %d at %#x, want %#x: %+v", i, got[i].PC, pc, got)
		}
	}
	if got[2].CFAOffset != 24 {
		t.Fatalf("rows out of order: %+v", got)
	}
}

func TestArenaMergesFreedRuns(t *testing.T) {
	a := newArena(100, 0)
	x, _ := a.alloc(30)
	y, _ := a.alloc(30)
	z, _ := a.alloc(40)
	if _, ok := a.alloc(1); ok {
		t.Fatal("allocated past the end")
	}
	a.release(x, 30, false)
	a.release(z, 40, false)
	if _, ok := a.alloc(50); ok {
		t.Fatal("allocated 50 rows in two runs of 30 and 40")
	}
	a.release(y, 30, false)
	if first, ok := a.alloc(100); !ok || first != 0 || a.used != 100 {
		t.Fatalf("whole store after freeing all: %d %v (used %d)", first, ok, a.used)
	}
}

// TestArenaQuarantine: rows withdrawn while walks may read them are handed
// out again only once the quarantine passed.
func TestArenaQuarantine(t *testing.T) {
	const q = 50 * time.Millisecond
	a := newArena(10, q)
	x, _ := a.alloc(10)
	a.release(x, 10, true)
	if _, ok := a.alloc(10); ok {
		t.Fatal("quarantined rows handed out at once")
	}
	start := time.Now()
	if !a.waitQuarantine(10) {
		t.Fatal("no wait for quarantined rows that make room")
	}
	if time.Since(start) < q/2 {
		t.Fatalf("waited %v of a %v quarantine", time.Since(start), q)
	}
	if first, ok := a.alloc(10); !ok || first != 0 {
		t.Fatalf("rows not back after the quarantine: %d %v", first, ok)
	}
}

// TestArenaReserve: reserving a run in the middle of free room leaves the
// rest free on both sides.
func TestArenaReserve(t *testing.T) {
	a := newArena(100, 0)
	a.reserve(40, 20)
	if a.used != 20 || len(a.free) != 2 || a.free[0] != (extent{0, 40}) || a.free[1] != (extent{60, 40}) {
		t.Fatalf("after reserving 40-60: used %d, free %+v", a.used, a.free)
	}
	if a.contiguous() {
		t.Fatal("two free runs reported contiguous")
	}
}
