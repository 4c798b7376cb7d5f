package hotspot

import "errors"

// HotSpot compresses its line tables and compiled methods' debug
// information with UNSIGNED5 (Pack200's variable-length integers: bytes
// below 192 end a number; up to five bytes of 6 bits, then 8). From JDK 21
// the encoding leaves the zero byte out (excluded = 1), so that a zero ends
// a stream.

const (
	u5Low       = 192 // bytes from here on continue a number
	u5MaxBytes  = 5
	u5LowShift  = 6 // bits each continuing byte adds
	maxScopes   = 64
	maxDecodes  = 1 << 16
	lineEscape  = 0xff
	lineEnd     = 0x00
	maxLineRows = 1 << 16
)

var errStream = errors.New("malformed compressed stream")

// stream reads UNSIGNED5 numbers from b.
type stream struct {
	b        []byte
	pos      int
	excluded uint8
}

// uint reads one unsigned number.
func (s *stream) uint() (uint32, error) {
	var sum uint32
	shift := uint(0)
	for i := 0; i < u5MaxBytes; i++ {
		if s.pos >= len(s.b) {
			return 0, errStream
		}
		c := s.b[s.pos]
		s.pos++
		if c < s.excluded {
			return 0, errStream
		}
		c -= s.excluded
		sum += uint32(c) << shift
		if c < u5Low-s.excluded || i == u5MaxBytes-1 {
			return sum, nil
		}
		shift += u5LowShift
	}
	return sum, nil
}

// int reads one signed number, zigzag-encoded.
func (s *stream) int() (int32, error) {
	v, err := s.uint()
	if err != nil {
		return 0, err
	}
	return int32(v>>1) ^ -int32(v&1), nil
}

// lineRow is one row of a method's line table: from bytecode index BCI
// on, the source line Line.
type lineRow struct {
	BCI  uint16
	Line uint32
}

// decodeLineTable decodes a ConstMethod's compressed line table (HotSpot's
// CompressedLineNumberReadStream): a byte holding a bytecode-index delta
// in its 5 high bits and a line delta in its 3 low bits, or the escape
// 0xff and both deltas as signed UNSIGNED5 numbers; 0 ends it. It returns
// the rows and how many bytes the table took; a table cut short returns
// what it read with an error.
func decodeLineTable(b []byte, excluded uint8) ([]lineRow, int, error) {
	s := stream{b: b, excluded: excluded}
	var rows []lineRow
	bci, line := int64(0), int64(0)
	for len(rows) < maxLineRows {
		if s.pos >= len(b) {
			return rows, s.pos, errStream
		}
		c := b[s.pos]
		s.pos++
		switch c {
		case lineEnd:
			return rows, s.pos, nil
		case lineEscape:
			db, err := s.int()
			if err != nil {
				return rows, s.pos, err
			}
			dl, err := s.int()
			if err != nil {
				return rows, s.pos, err
			}
			bci += int64(db)
			line += int64(dl)
		default:
			bci += int64(c >> 3)
			line += int64(c & 7)
		}
		if bci < 0 || bci > 0xffff || line < 0 || line > 1<<31-1 {
			return rows, s.pos, errStream
		}
		rows = append(rows, lineRow{BCI: uint16(bci), Line: uint32(line)})
	}
	return rows, s.pos, errStream
}

// lineOf returns the line of bytecode index bci as HotSpot's
// Method::line_number_from_bci does: the row of that index, else the
// closest one before it; 0 if none.
func lineOf(rows []lineRow, bci int) uint32 {
	best, bestBCI := uint32(0), -1
	for _, r := range rows {
		b := int(r.BCI)
		if b == bci {
			return r.Line
		}
		if b < bci && b >= bestBCI {
			best, bestBCI = r.Line, b
		}
	}
	return best
}

// scope is one level of a compiled frame's inlining: the method (its
// index in the nmethod's metadata, from 1) and the bytecode index it runs.
type scope struct {
	method uint32
	bci    int32 // -1: the method's entry
}

// decodeScopes decodes the chain of scopes from the one at offset in an
// nmethod's scopes data, innermost first (ScopeDesc::decode_body: the
// sender's offset, the method's metadata index, the bytecode index plus
// one), until a scope with no sender. Offsets only go down along a chain,
// which bounds it; at most maxScopes are read.
func decodeScopes(data []byte, offset uint32, excluded uint8, dst []scope) ([]scope, error) {
	limit := uint32(len(data))
	for i := 0; offset != 0 && i < maxScopes; i++ {
		if offset >= limit {
			return dst, errStream
		}
		s := stream{b: data, pos: int(offset), excluded: excluded}
		sender, err := s.uint()
		if err != nil {
			return dst, err
		}
		method, err := s.uint()
		if err != nil {
			return dst, err
		}
		bci, err := s.uint()
		if err != nil {
			return dst, err
		}
		dst = append(dst, scope{method: method, bci: int32(bci) - 1})
		// A sender is recorded before the scopes that name it.
		limit = offset
		offset = sender
	}
	if offset != 0 {
		return dst, errStream
	}
	return dst, nil
}
