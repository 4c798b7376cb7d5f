package cfi

import (
	"cmp"
	"slices"
)

// Ranges are half-open address ranges [Start, End), sorted and disjoint.
type Range struct{ Start, End uint64 }

// compile runs the FDEs' instructions in address order into table rows.
// FDEs that keep rejects (outside the executable code) or that overlap an
// earlier one are skipped and counted.
func compile(fdes []fde, b *bases, keep func(begin, end uint64) bool, st *parseStats) []Row {
	slices.SortStableFunc(fdes, func(x, y fde) int {
		switch {
		case x.begin < y.begin:
			return -1
		case x.begin > y.begin:
			return 1
		}
		return 0
	})
	inits := make(map[*cie]*state)
	m := &machine{b: b}
	var rows rowBuilder
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
			rows.add(Row{PC: prevEnd})
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
			rows.add(Row{PC: f.begin, CFA: CFAUnsupported})
			continue
		}
		m.initial, m.cur, m.loc = *init, *init, f.begin
		m.stack = m.stack[:0]
		signal := f.cie.signal
		end := f.end
		err := m.run(f.insns, func(loc uint64, s *state) bool {
			if loc >= end {
				return false
			}
			rows.add(s.row(loc, signal))
			return true
		})
		if err != nil {
			st.badFDEs++
			if m.loc < end {
				rows.add(Row{PC: m.loc, CFA: CFAUnsupported})
			}
		}
	}
	if have {
		rows.add(Row{PC: prevEnd})
	}
	return rows.rows()
}

// rowChunk is the number of rows of a rowBuilder chunk (96 KiB).
const rowChunk = 4096

// rowBuilder collects a table's rows as appendRow does, in chunks of
// rowChunk: a slice grown by append copies itself at each regrowth and
// the old array stays until a GC, so a large table (libLLVM's: 950k rows,
// 22 MB) took five times its size to build. In chunks it takes twice: the
// chunks and the exact copy rows returns.
type rowBuilder struct {
	full [][]Row // chunks filled
	cur  []Row   // the chunk being filled
}

// add appends r, keeping rows compact like appendRow.
func (b *rowBuilder) add(r Row) {
	if last, ok := b.last(); ok && last.PC == r.PC {
		b.pop()
	}
	if last, ok := b.last(); ok && sameRule(last, r) {
		return
	}
	if _, ok := b.last(); !ok && r.CFA == CFANone {
		return // nothing to end
	}
	if len(b.cur) == cap(b.cur) {
		if b.cur != nil {
			b.full = append(b.full, b.cur)
		}
		b.cur = make([]Row, 0, rowChunk)
	}
	b.cur = append(b.cur, r)
}

func (b *rowBuilder) last() (Row, bool) {
	if len(b.cur) == 0 && len(b.full) > 0 {
		// A pop emptied the chunk: the previous one ends the rows.
		b.cur, b.full = b.full[len(b.full)-1], b.full[:len(b.full)-1]
	}
	if len(b.cur) == 0 {
		return Row{}, false
	}
	return b.cur[len(b.cur)-1], true
}

func (b *rowBuilder) pop() { b.cur = b.cur[:len(b.cur)-1] }

// rows returns the rows in one slice of exactly their number, so that the
// table holds (and Size counts) no spare capacity.
func (b *rowBuilder) rows() []Row {
	n := len(b.cur)
	for _, c := range b.full {
		n += len(c)
	}
	if n == 0 {
		return nil
	}
	out := make([]Row, 0, n)
	for i, c := range b.full {
		out = append(out, c...)
		b.full[i] = nil // collectable while the rest is copied
	}
	return append(out, b.cur...)
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
func (t *Table) Fill(other *Table) *Table {
	a, b := t.Rows, other.Rows
	out := make([]Row, 0, len(a)+len(b))
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
		out = appendRow(out, r)
	}
	return &Table{Rows: append([]Row(nil), out...)}
}
