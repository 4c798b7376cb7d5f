package dwarfsym

import (
	"debug/elf"
	"reflect"
	"testing"

	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
)

// TestSkipBySiblingSameTables parses every unit of the C and C++ DWARF
// workloads and of libc6-dbg's libc twice: skipping type and call-site
// subtrees by their DW_AT_sibling, and decoding them through. The tables
// must be the same, and the siblings must have been followed.
func TestSkipBySiblingSameTables(t *testing.T) {
	var paths []string
	for _, w := range symtest.DWARFWorkloads(t, workloadDir) {
		switch w.Name {
		case "c-dwarf5", "c-dwarf4", "cpp-dwarf5", "cpp-dwarf4":
			paths = append(paths, w.Path)
		}
	}
	libc, _ := symtest.LibcDebugFile(t)
	paths = append(paths, libc)
	for _, p := range paths {
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		src, err := loadDWARFSources(f)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		u, err := newDWARFUnits(src)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		full, err := src.fullData(u.units)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		skips, tables := 0, 0
		for _, start := range u.units {
			jump := newUnitReader(full, &src)
			got, err1 := jump.table(start)
			read := newUnitReader(full, &src)
			read.readSkipped = true
			want, err2 := read.table(start)
			if (err1 == nil) != (err2 == nil) {
				t.Fatalf("%s unit at %#x: error %v skipping by sibling, %v reading through", p, start.off, err1, err2)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s unit at %#x: tables differ when skipped by sibling", p, start.off)
			}
			if read.siblingSkips != 0 {
				t.Fatalf("%s: %d sibling skips while reading through", p, read.siblingSkips)
			}
			skips += jump.siblingSkips
			if got != nil && len(got.funcs) > 0 {
				tables++
			}
		}
		t.Logf("%s: %d units, %d with functions, %d subtrees skipped by sibling", p, len(u.units), tables, skips)
		if skips == 0 || tables == 0 {
			t.Errorf("%s: %d subtrees skipped by sibling in %d units with functions: the test compared nothing", p, skips, tables)
		}
		f.Close()
	}
}
