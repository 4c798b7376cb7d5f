package loader

import (
	"bytes"
	"debug/elf"
	"testing"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// TestVDSORowsCoverItsFunctions compiles the running kernel's vDSO: every
// function it exports has rows, at offsets in the image (where a process
// maps its first byte), and the frameless ones say so (CFA = RSP + 8)
// rather than leaving the walk to frame pointers.
func TestVDSORowsCoverItsFunctions(t *testing.T) {
	image, err := process.VDSOImage()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := vdsoRows(image)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var seg *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			seg = p
		}
	}
	table := &cfi.Table{Rows: rows}
	funcs := 0
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 {
			continue
		}
		funcs++
		at := s.Value - seg.Vaddr + seg.Off
		r, ok := table.Lookup(at)
		if !ok || r.CFA != cfi.CFASP || r.CFAOffset != 8 {
			t.Errorf("%s at %#x: row %+v (found %v), want CFA = RSP + 8 at its entry", s.Name, at, r, ok)
		}
		if at+s.Size > uint64(len(image)) {
			t.Errorf("%s ends at %#x, beyond the image's %#x bytes", s.Name, at+s.Size, len(image))
		}
	}
	if funcs == 0 {
		t.Fatal("the vDSO exports no function")
	}
	t.Logf("%d rows for the vDSO's %d exported functions", len(rows), funcs)
}
