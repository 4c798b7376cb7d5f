package dwarfsym

import (
	"debug/elf"
	"path/filepath"
	"strings"
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
			u := indexUnits(t, testworkload.BuildC(t, "cpuhog.c", "-O2", dw, "-fno-omit-frame-pointer"))
			if len(u.units) == 0 || u.units[0].hdr != 0 {
				t.Fatalf("units %+v: want the first at offset 0", u.units)
			}
			requireAllAlone(t, u)
		})
	}
}

// TestWideImplicitConstReadAlone checks that a unit whose abbreviations
// hold a DW_FORM_implicit_const of 10 bytes is still read alone. Such a
// value (-2^63+1, in enumerators of CPython 3.11 and 3.12) once made three
// of libpython3.12's 155 units look unreadable alone, and the whole-DWARF
// reader they brought in held 3.5 MB of abbreviations, half of the live
// heap when profiling Python 3.12. The workload holds such a value;
// so does every pyenv libpython it finds.
func TestWideImplicitConstReadAlone(t *testing.T) {
	t.Run("wideconst.c", func(t *testing.T) {
		bin := testworkload.BuildC(t, "wideconst.c", "-O0", "-gdwarf-5")
		requireAllAlone(t, indexUnits(t, bin))
	})
	for _, py := range testworkload.Pythons(t) {
		if !strings.Contains(py.Name, "pyenv") {
			continue
		}
		libs, _ := filepath.Glob(filepath.Join(filepath.Dir(py.Path), "..", "lib", "libpython3.*.so.1.0"))
		for _, lib := range libs {
			t.Run(filepath.Base(lib), func(t *testing.T) { requireAllAlone(t, indexUnits(t, lib)) })
		}
	}
}

func indexUnits(t *testing.T, path string) *dwarfUnits {
	t.Helper()
	f, err := elf.Open(path)
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
	return u
}

// requireAllAlone fails unless every unit of u is read by a reader of its
// own and no whole-DWARF reader was built.
func requireAllAlone(t *testing.T, u *dwarfUnits) {
	t.Helper()
	for i, alone := range u.alone {
		if !alone {
			t.Errorf("unit %d of %d (%+v) needs the whole-DWARF reader", i, len(u.units), u.units[i])
		}
	}
	if u.needsFull || u.full.Load() != nil {
		t.Errorf("the index built the whole-DWARF reader for a binary whose units all stand alone")
	}
	if len(u.ranges) == 0 {
		t.Errorf("no unit ranges indexed")
	}
}
