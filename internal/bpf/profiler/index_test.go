package profiler

import (
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// lastRowAtMost is the row the BPF search must find for target, a PC
// relative to base: the last one whose PC is at most target, by the
// standard library's search over all rows; -1 when none is.
func lastRowAtMost(rows []cfi.Row, base, target uint64) int {
	return sort.Search(len(rows), func(i int) bool { return rows[i].PC-base > target }) - 1
}

// randomTable is n rows from base+lead on, sorted, with gaps that vary
// from a byte to far apart (a table spanning several files' worth of
// code has both dense functions and long stretches without CFI).
func randomTable(rng *rand.Rand, n int, base, lead uint64) []cfi.Row {
	rows := make([]cfi.Row, n)
	pc := base + lead
	for i := range rows {
		rows[i] = cfi.Row{PC: pc, CFA: cfi.CFASP, CFAOffset: 8}
		switch rng.IntN(10) {
		case 0:
			pc += 1 + rng.Uint64N(1<<16)
		case 1, 2:
			pc += 1
		default:
			pc += 1 + rng.Uint64N(64)
		}
	}
	return rows
}

// TestUnwindIndexBoundsTheSearch checks the index the BPF search relies
// on against a search of all the rows: the row holding any PC lies
// between the entries of its granule and the next, or is the last row
// past the last granule; and the index takes at most about an eighth of
// the rows' room.
func TestUnwindIndexBoundsTheSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const base = 0x400000
	for _, tc := range []struct {
		n    int
		lead uint64 // the first row's PC past base: PCs below it have no row
	}{{1, 0}, {2, 0}, {3, 100}, {7, 0}, {64, 0}, {1000, 4096}, {20000, 0}} {
		rows := randomTable(rng, tc.n, base, tc.lead)
		table := LayOutUnwindTable(rows, base)
		ix := table.Index
		entries := make([]uint32, 2*(int(table.Slots)-tc.n))
		if int(ix.Granules)+1 > len(entries) {
			t.Fatalf("%d rows: %d granules need %d entries, the layout has room for %d", tc.n, ix.Granules, ix.Granules+1, len(entries))
		}
		if extra := int(table.Slots) - tc.n; extra > max(tc.n/8, 1)+1 {
			t.Errorf("%d rows: the index takes %d slots, over an eighth of the rows", tc.n, extra)
		}
		fillIndex(entries, rows, base, ix)
		last := rows[tc.n-1].PC - base
		if uint64(ix.Granules) != last>>ix.Shift+1 {
			t.Fatalf("%d rows: %d granules of 2^%d bytes for a last PC of %#x", tc.n, ix.Granules, ix.Shift, last)
		}
		targets := []uint64{0, last + 1, last + 1<<ix.Shift, uint64(ix.Granules) << ix.Shift}
		for _, r := range rows {
			rel := r.PC - base
			targets = append(targets, rel, rel+1)
			if rel > 0 {
				targets = append(targets, rel-1)
			}
		}
		for _, target := range targets {
			want := lastRowAtMost(rows, base, target)
			g := target >> ix.Shift
			lo, hi := tc.n-1, tc.n-1
			if g < uint64(ix.Granules) {
				lo, hi = int(entries[g]), int(entries[g+1])
			}
			if want < 0 {
				// No row: the search ends on a row past target.
				if rows[lo].PC-base <= target {
					t.Fatalf("%d rows: PC %#x has no row, yet granule %d starts at row %d (%#x)", tc.n, target, g, lo, rows[lo].PC-base)
				}
				continue
			}
			if want < lo || want > hi {
				t.Fatalf("%d rows: PC %#x is in row %d, outside rows [%d, %d] of granule %d (2^%d bytes)",
					tc.n, target, want, lo, hi, g, ix.Shift)
			}
		}
	}
}
