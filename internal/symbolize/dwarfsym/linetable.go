package dwarfsym

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// lineTable is the rows of a line table, sorted by address, packed into
// blocks of lineBlockRows rows. Each row is stored as a difference from the
// row before it in its block: a few bytes instead of a 16-byte lineRow, so
// the line tables of the compile units a profile touches (most of a parsed
// unit's bytes) take about a fifth of the heap. A lookup searches the
// blocks' first addresses and decodes one block.
type lineTable struct {
	starts []uint64 // address of each block's first row
	offs   []uint32 // where each block starts in data
	data   []byte
}

// lineBlockRows is how many rows a block holds: few enough that decoding
// one is cheap next to the search, enough that the per-block index costs
// well under a byte a row.
const lineBlockRows = 16

// A row's encoding: the uvarint address difference from the previous row
// of its block (the block's first row differs by 0 from the block's
// start), then a uvarint token whose lowest bit marks an end of sequence.
// Other rows carry, above two flag bits, the zigzag line difference from
// the previous row's line; the second bit says a uvarint file index
// follows. A block starts from file 0 and line 0.
const (
	rowEnd         = 1
	rowFileChanged = 2
)

// encodeLines packs rows, sorted by address.
func encodeLines(rows []lineRow) lineTable {
	var t lineTable
	if len(rows) == 0 {
		return t
	}
	blocks := (len(rows) + lineBlockRows - 1) / lineBlockRows
	t.starts = make([]uint64, 0, blocks)
	t.offs = make([]uint32, 0, blocks)
	// Most rows take two or three bytes: size for three, trim after.
	data := make([]byte, 0, 3*len(rows)+binary.MaxVarintLen64)
	var addr uint64
	var file uint32
	var line int32
	for i, r := range rows {
		if i%lineBlockRows == 0 {
			if len(data) > math.MaxUint32-lineBlockRows*3*binary.MaxVarintLen64 {
				break // block offsets are 32 bits; no unit comes near
			}
			t.starts = append(t.starts, r.addr)
			t.offs = append(t.offs, uint32(len(data)))
			addr, file, line = r.addr, 0, 0
		}
		data = binary.AppendUvarint(data, r.addr-addr)
		addr = r.addr
		if r.end() {
			data = append(data, rowEnd)
			continue
		}
		d := int64(r.line) - int64(line)
		tok := (uint64(d<<1) ^ uint64(d>>63)) << 2
		if r.file != file {
			tok |= rowFileChanged
		}
		data = binary.AppendUvarint(data, tok)
		if r.file != file {
			data = binary.AppendUvarint(data, uint64(r.file))
		}
		file, line = r.file, r.line
	}
	t.data = append([]byte(nil), data...)
	return t
}

// lineCursor decodes the rows of one block.
type lineCursor struct {
	data []byte
	row  lineRow
	// file and line are those of the last row that was not an end.
	file uint32
	line int32
	left int // rows left in the block
}

func (t *lineTable) block(b int) lineCursor {
	end := len(t.data)
	left := lineBlockRows
	if b+1 < len(t.offs) {
		end = int(t.offs[b+1])
	}
	return lineCursor{data: t.data[t.offs[b]:end], row: lineRow{addr: t.starts[b]}, left: left}
}

// next decodes the next row of the block into c.row; false at its end.
func (c *lineCursor) next() bool {
	if c.left == 0 || len(c.data) == 0 {
		return false
	}
	c.left--
	delta, n := binary.Uvarint(c.data)
	if n <= 0 {
		return false
	}
	c.data = c.data[n:]
	tok, n := binary.Uvarint(c.data)
	if n <= 0 {
		return false
	}
	c.data = c.data[n:]
	c.row.addr += delta
	if tok&rowEnd != 0 {
		c.row.file, c.row.line = endOfSequence, 0
		return true
	}
	if tok&rowFileChanged != 0 {
		f, n := binary.Uvarint(c.data)
		if n <= 0 {
			return false
		}
		c.data = c.data[n:]
		c.file = uint32(f)
	}
	z := tok >> 2
	c.line += int32(int64(z>>1) ^ -int64(z&1))
	c.row.file, c.row.line = c.file, c.line
	return true
}

// at returns the last row at or before pc.
func (t *lineTable) at(pc uint64) (lineRow, bool) {
	lo, hi := 0, len(t.starts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.starts[m] > pc {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return lineRow{}, false
	}
	c := t.block(lo - 1)
	var last lineRow
	found := false
	for c.next() && c.row.addr <= pc {
		last, found = c.row, true
	}
	return last, found
}

// each calls f with every row in address order.
func (t *lineTable) each(f func(lineRow)) {
	for b := range t.starts {
		c := t.block(b)
		for c.next() {
			f(c.row)
		}
	}
}

// heapSize is the bytes the table holds.
func (t *lineTable) heapSize() int64 {
	return int64(cap(t.starts))*8 + int64(cap(t.offs))*4 + int64(cap(t.data)) + int64(unsafe.Sizeof(*t))
}
