package cfi

import (
	"cmp"
	"slices"
)

// Ranges are half-open address ranges [Start, End), sorted and disjoint.
type Range struct{ Start, End uint64 }

// compile runs the instructions of fdes, parsed from data, in address
// order into table rows.
// FDEs that keep rejects (outside the executable code) or that overlap an
// earlier one are skipped and counted.
//
// The instructions are run twice: once to count the rows, once to write
// them into a slice of exactly that length. Collecting them first and
// copying them out took twice the table's size at the peak (libLLVM's
// table is 22 MB); running the FDEs again costs CPU, not memory.
func compile(a *arch, data []byte, fdes []fde, b *bases, keep func(begin, end uint64) bool, st *parseStats) []Row {
	slices.SortStableFunc(fdes, func(x, y fde) int {
		switch {
		case x.begin < y.begin:
			return -1
		case x.begin > y.begin:
			return 1
		}
		return 0
	})
	var discard parseStats
	return exactRows(
		func(add func(Row)) { emitRows(a, data, fdes, b, keep, &discard, add) },
		func(add func(Row)) { emitRows(a, data, fdes, b, keep, st, add) })
}

// exactRows returns the rows write gives, kept compact by appendRow, in a
// slice of exactly their number: count gives the same rows first, to size
// it. Collecting the rows and copying them out would hold twice the table
// at the peak.
func exactRows(count, write func(add func(Row))) []Row {
	var c rowCounter
	count(c.add)
	rows := make([]Row, 0, c.n)
	write(func(r Row) { rows = appendRow(rows, r) })
	if len(rows) == 0 {
		return nil
	}
	if len(rows) != cap(rows) {
		// Not reached: the counter follows appendRow. Should it ever
		// not, the table is still right, only copied.
		rows = append([]Row(nil), rows...)
	}
	return rows
}

// emitRows runs the sorted FDEs' instructions, calling add with each row
// in address order; add must keep rows compact as appendRow does.
func emitRows(a *arch, data []byte, fdes []fde, b *bases, keep func(begin, end uint64) bool, st *parseStats, add func(Row)) {
	inits := make(map[*cie]*state)
	m := &machine{a: a, b: b}
	var prevEnd uint64
	have := false
	for i := range fdes {
		f := &fdes[i]
		if keep != nil && !keep(f.begin, f.end) {
			st.outside++
			continue
		}
		if have && f.begin < prevEnd {
			st.overlaps++
			continue
		}
		if have && f.begin > prevEnd {
			add(Row{PC: prevEnd})
		}
		have = true
		prevEnd = f.end

		m.c = f.cie
		init, ok := inits[f.cie]
		if !ok {
			m.cur = state{}
			m.stack = m.stack[:0]
			if err := m.run(f.cie.initial, nil); err != nil {
				init = nil
			} else {
				s := m.cur
				init = &s
			}
			inits[f.cie] = init
		}
		if init == nil {
			st.badFDEs++
			add(Row{PC: f.begin, CFA: CFAUnsupported})
			continue
		}
		m.initial, m.cur, m.loc = *init, *init, f.begin
		m.stack = m.stack[:0]
		signal := f.cie.signal
		end := f.end
		err := m.run(f.insns(data), func(loc uint64, s *state) bool {
			if loc >= end {
				return false
			}
			add(s.row(a, loc, signal))
			return true
		})
		if err != nil {
			st.badFDEs++
			if m.loc < end {
				add(Row{PC: m.loc, CFA: CFAUnsupported})
			}
		}
	}
	if have {
		add(Row{PC: prevEnd})
	}
}

// rowCounter counts the rows appendRow would keep, holding only the last
// two. emitRows gives rows in nondecreasing PC order, so a row replaces
// at most the last one, and never after a replacement was dropped. Rows
// out of order (never seen) could make the count wrong; the rows are
// still appendRow's, and exactRows' final check trims a wrong capacity.
type rowCounter struct {
	n          int
	last, prev Row // valid when n > 0 and n > 1
}

func (c *rowCounter) add(r Row) {
	if c.n > 0 && c.last.PC == r.PC {
		c.n--
		c.last = c.prev
	}
	if c.n > 0 && sameRule(c.last, r) {
		return
	}
	if c.n == 0 && r.CFA == CFANone {
		return // nothing to end
	}
	c.prev, c.last = c.last, r
	c.n++
}

// sameRule tells whether two rows hold the same unwind rule.
func sameRule(a, b Row) bool {
	a.PC = b.PC
	return a == b
}

// appendRow appends r, keeping rows compact: a row at the PC of the last
// row replaces it, and a row with the rule of the last row is dropped.
func appendRow(rows []Row, r Row) []Row {
	if n := len(rows); n > 0 && rows[n-1].PC == r.PC {
		rows = rows[:n-1]
	}
	if n := len(rows); n > 0 && sameRule(rows[n-1], r) {
		return rows
	}
	if len(rows) == 0 && r.CFA == CFANone {
		return rows // nothing to end
	}
	return append(rows, r)
}

// Lookup returns the row in force at pc; ok is false before the first row.
func (t *Table) Lookup(pc uint64) (Row, bool) {
	i, found := slices.BinarySearchFunc(t.Rows, pc, func(r Row, pc uint64) int { return cmp.Compare(r.PC, pc) })
	if !found {
		if i == 0 {
			return Row{PC: pc}, false
		}
		i--
	}
	return t.Rows[i], true
}

// Covered returns how many bytes of ranges have a rule other than
// CFANone.
func (t *Table) Covered(ranges []Range) uint64 {
	var n uint64
	for i, r := range t.Rows {
		if r.CFA == CFANone || i+1 == len(t.Rows) {
			continue
		}
		lo, hi := r.PC, t.Rows[i+1].PC
		for _, x := range ranges {
			a, b := max(lo, x.Start), min(hi, x.End)
			if a < b {
				n += b - a
			}
		}
	}
	return n
}

// Fill returns a table holding t's rules, with other's rules wherever t
// has none (CFANone or outside t's rows). t and other are not modified.
// The rows are merged twice (exactRows), so that no larger slice is held
// beside the result.
func (t *Table) Fill(other *Table) *Table {
	merge := func(add func(Row)) { fillRows(t.Rows, other.Rows, add) }
	return &Table{Rows: exactRows(merge, merge)}
}

// fillRows merges a and b as Fill does, calling add with each row in
// strictly increasing PC order.
func fillRows(a, b []Row, add func(Row)) {
	var i, j int
	ra, rb := Row{}, Row{} // rules in force; zero is CFANone
	for i < len(a) || j < len(b) {
		var pc uint64
		switch {
		case j == len(b) || (i < len(a) && a[i].PC < b[j].PC):
			pc = a[i].PC
		default:
			pc = b[j].PC
		}
		for i < len(a) && a[i].PC == pc {
			ra = a[i]
			i++
		}
		for j < len(b) && b[j].PC == pc {
			rb = b[j]
			j++
		}
		r := ra
		if r.CFA == CFANone {
			r = rb
		}
		r.PC = pc
		add(r)
	}
}
