package v8

import (
	"github.com/bpfcol/bpfcol/internal/frame"
)

// lineCol is a 1-based line and column; zero when unknown.
type lineCol struct{ line, col int32 }

// fn is a function a table names.
type fn struct{ name, file string }

// inlining is one inlining position of optimized code: the function
// inlined, and where its caller (an inlining id, 0 for the code's own
// function) called it.
type inlining struct {
	fn     int
	caller uint32
	call   lineCol
}

// table maps an offset in a function's code (machine code, or bytecode)
// to its source lines, inlined functions first. It implements
// interp.InlineTable.
type table struct {
	// codes are the code offsets the entries start at, sorted; at[i] is
	// entry i's position: its line and column, in the function of its
	// inlining id inl[i].
	codes []uint32
	at    []lineCol
	inl   []uint32
	// fns are the functions: 0 is the code's own, i > 0 the one the
	// deoptimization literals hold at i-1.
	fns     []fn
	inlined []inlining // by inlining id - 1
}

// bytes is what t holds, for the cache's bound.
func (t *table) bytes() int64 {
	n := int64(len(t.codes)*4 + len(t.at)*8 + len(t.inl)*4 + len(t.inlined)*24 + 96)
	for _, f := range t.fns {
		n += int64(len(f.name) + len(f.file) + 32)
	}
	return n
}

// entry returns the entry in force at offset, -1 when none is.
func (t *table) entry(offset uint32) int {
	lo, hi := 0, len(t.codes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.codes[m] <= offset {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// Line implements interp.LineTable: the line of the innermost function.
func (t *table) Line(offset uint32) int64 {
	if i := t.entry(offset); i >= 0 {
		return int64(t.at[i].line)
	}
	return 0
}

// Lines implements interp.InlineTable: at an offset with no position
// (or none known), the code's own function without a line.
func (t *table) Lines(offset uint32) []frame.Line {
	i := -1
	if offset != frame.NoOffset {
		i = t.entry(offset)
	}
	if i < 0 {
		return []frame.Line{t.line(0, lineCol{})}
	}
	var out []frame.Line
	pos, id := t.at[i], t.inl[i]
	// An inlining chain is as deep as the inlinings; ids only go down.
	for range len(t.inlined) + 1 {
		if id == 0 || int(id) > len(t.inlined) {
			break
		}
		in := t.inlined[id-1]
		out = append(out, t.line(in.fn, pos))
		if in.caller >= id {
			break
		}
		pos, id = in.call, in.caller
	}
	return append(out, t.line(0, pos))
}

func (t *table) line(f int, pos lineCol) frame.Line {
	if f < 0 || f >= len(t.fns) {
		return frame.Line{Name: anonymous}
	}
	return frame.Line{Name: t.fns[f].name, File: t.fns[f].file, Line: int64(pos.line), Column: int64(pos.col)}
}
