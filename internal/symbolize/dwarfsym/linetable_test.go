package dwarfsym

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/frame"
)

// TestLineTableMatchesRows packs random line tables (sequences with gaps,
// rows at equal addresses, large address and line jumps, negative line
// steps, file changes) and checks that every row decodes as stored and
// that a lookup at, between and around the rows finds the row a binary
// search of the unpacked rows finds.
func TestLineTableMatchesRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var rows []lineRow
		addr := 1 + uint64(rng.IntN(1<<20))
		for range rng.IntN(300) {
			// One sequence, then its end row.
			for range 1 + rng.IntN(40) {
				switch rng.IntN(8) {
				case 0: // a row at the previous row's address
				case 1:
					addr += uint64(rng.IntN(1 << 30))
				default:
					addr += uint64(1 + rng.IntN(64))
				}
				line := int32(rng.IntN(5000))
				if rng.IntN(50) == 0 {
					line = math.MaxInt32 - int32(rng.IntN(3))
				}
				rows = append(rows, lineRow{addr: addr, file: uint32(rng.IntN(12)), line: line})
			}
			addr += uint64(1 + rng.IntN(16))
			rows = append(rows, lineRow{addr: addr, file: endOfSequence})
			addr += uint64(rng.IntN(3) * rng.IntN(1000))
		}
		tab := encodeLines(rows)

		var decoded []lineRow
		tab.each(func(r lineRow) { decoded = append(decoded, r) })
		if !slices.Equal(decoded, rows) {
			t.Fatalf("trial %d: %d rows packed, %d decoded differently", trial, len(rows), len(decoded))
		}
		want := func(pc uint64) (lineRow, bool) {
			i, _ := slices.BinarySearchFunc(rows, pc+1, func(r lineRow, a uint64) int {
				if r.addr < a {
					return -1
				}
				return 1
			})
			if i == 0 {
				return lineRow{}, false
			}
			return rows[i-1], true
		}
		for _, r := range rows {
			for _, pc := range []uint64{r.addr - 1, r.addr, r.addr + 1} {
				got, gotOK := tab.at(pc)
				w, wOK := want(pc)
				if got != w || gotOK != wOK {
					t.Fatalf("trial %d: at(%#x) = %+v %v, want %+v %v", trial, pc, got, gotOK, w, wOK)
				}
			}
		}
		if len(rows) >= 64 && tab.heapSize() >= int64(len(rows))*int64(16) {
			t.Errorf("trial %d: %d rows take %d bytes packed, no less than unpacked", trial, len(rows), tab.heapSize())
		}
	}
}

// TestDWARFTableNamesOwnTheirBytes builds a unit's table with an inlined
// call and checks the frames at an address in it: the chain, the call
// site, and that the names returned do not point into the table's shared
// name string, which a cached frame would otherwise keep alive after the
// unit's eviction.
func TestDWARFTableNamesOwnTheirBytes(t *testing.T) {
	u := unitTables{
		lines:  []lineRow{{addr: 0x1000, file: 0, line: 3}, {addr: 0x1008, file: 0, line: 4}, {addr: 0x1010, file: endOfSequence}},
		seqs:   [][2]int32{{0, 3}},
		files:  []string{"a.c"},
		funcs:  []scopeRange{{lo: 0x1000, size: 0x10, scope: 0}},
		scopes: []scopeInfo{{name: "outer"}, {name: "inner", callFile: "b.h", callLine: 7}, {name: "inner", callFile: "a.c", callLine: 9}},
		inlined: []childOf{
			{parent: 0, sr: scopeRange{lo: 0x100c, size: 4, scope: 2}},
			{parent: 0, sr: scopeRange{lo: 0x1004, size: 4, scope: 1}},
		},
	}
	tab, err := mergeUnits([]unitTables{u})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pc   uint64
		want []frame.Line
	}{
		{0x1002, []frame.Line{{Name: "outer", File: "a.c", Line: 3}}},
		{0x1005, []frame.Line{{Name: "inner", File: "a.c", Line: 3}, {Name: "outer", File: "b.h", Line: 7}}},
		{0x100d, []frame.Line{{Name: "inner", File: "a.c", Line: 4}, {Name: "outer", File: "a.c", Line: 9}}},
	} {
		got, ok := tab.lookup(c.pc)
		if !ok || !slices.Equal(got, c.want) {
			t.Errorf("lookup(%#x) = %+v, %v; want %+v", c.pc, got, ok, c.want)
		}
		names := unsafe.StringData(tab.names)
		for _, f := range got {
			if p := unsafe.StringData(f.Name); uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(names)) && uintptr(unsafe.Pointer(p)) < uintptr(unsafe.Pointer(names))+uintptr(len(tab.names)) {
				t.Errorf("lookup(%#x): %q points into the table's name string", c.pc, f.Name)
			}
		}
	}
	if _, ok := tab.lookup(0x1010); ok {
		t.Error("lookup past the end of the sequence and function named something")
	}
}
