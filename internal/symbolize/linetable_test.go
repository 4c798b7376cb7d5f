package symbolize

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
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
