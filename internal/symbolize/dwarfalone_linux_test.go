package symbolize

import (
	"debug/elf"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestFirstUnitReadAlone checks that the first compile unit of a C
// binary, at offset 0 of .debug_info where no placeholder header fits
// before it, is read by a reader of its own: a unit that refers to no
// other unit never brings in the whole-DWARF reader, which holds every
// unit's abbreviations (12 MB for libc6-dbg's libc).
func TestFirstUnitReadAlone(t *testing.T) {
	for _, dw := range []string{"-gdwarf-4", "-gdwarf-5"} {
		t.Run(dw, func(t *testing.T) {
			bin := testworkload.BuildC(t, "cpuhog.c", "-O2", dw, "-fno-omit-frame-pointer")
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			src, err := loadDWARFSources(f)
			if err != nil {
				t.Fatal(err)
			}
			u, err := newDWARFUnits(src)
			if err != nil {
				t.Fatal(err)
			}
			if len(u.units) == 0 || u.units[0].hdr != 0 {
				t.Fatalf("units %+v: want the first at offset 0", u.units)
			}
			for i, alone := range u.alone {
				if !alone {
					t.Errorf("unit %d (%+v) needs the whole-DWARF reader", i, u.units[i])
				}
			}
			if u.needsFull || u.full.Load() != nil {
				t.Errorf("the index built the whole-DWARF reader for a binary whose units all stand alone")
			}
			if len(u.ranges) == 0 {
				t.Errorf("no unit ranges indexed")
			}
		})
	}
}
