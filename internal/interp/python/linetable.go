package python

// Line tables map a bytecode offset, in bytes, to a source line, as
// CPython's PyCode_Addr2Line does for each version (Objects/lnotab_notes.txt,
// Objects/locations.md). Tables come from another process: every walk is
// bounded by the table's length, and a corrupt table gives a wrong or no
// line, never a loop or a panic.

// lnotabLine reads a co_lnotab (3.6-3.9): (bytecode, line) increments,
// the line's signed.
func lnotabLine(table []byte, first int64, offset uint32) int64 {
	line, addr := first, uint64(0)
	for i := 0; i+1 < len(table); i += 2 {
		addr += uint64(table[i])
		if addr > uint64(offset) {
			break
		}
		line += int64(int8(table[i+1]))
	}
	return line
}

// linetable310Line reads a 3.10 co_linetable: (bytecode length, line
// delta) pairs, each a range; a delta of -128 is a range without a line.
func linetable310Line(table []byte, first int64, offset uint32) int64 {
	line, end := first, uint64(0)
	for i := 0; i+1 < len(table); i += 2 {
		start := end
		end += uint64(table[i])
		delta := int8(table[i+1])
		rangeLine := int64(-1)
		if delta != -128 {
			line += int64(delta)
			rangeLine = line
		}
		if uint64(offset) >= start && uint64(offset) < end {
			return max(rangeLine, 0)
		}
	}
	return 0
}

// Codes of the 3.11+ location table's entries (Include/cpython/code.h,
// _PyCodeLocationInfoKind).
const (
	locOneLine0  = 10
	locOneLine1  = 11
	locOneLine2  = 12
	locNoColumns = 13
	locLong      = 14
	locNone      = 15
)

// locationsLine reads a 3.11+ location table: entries of 1-8 code units
// (2 bytes each), their first byte holding a code that says how the line
// changes from the previous entry's.
func locationsLine(table []byte, first int64, offset uint32) int64 {
	line, end := first, uint64(0)
	for i := 0; i < len(table); {
		b := table[i]
		if b&0x80 == 0 {
			return 0 // not at an entry's start: corrupt
		}
		code := b >> 3 & 15
		start := end
		end += (uint64(b&7) + 1) * 2
		switch code {
		case locNoColumns, locLong:
			line += int64(signedVarint(table[i+1:]))
		case locOneLine1:
			line++
		case locOneLine2:
			line += 2
		}
		rangeLine := line
		if code == locNone {
			rangeLine = 0
		}
		if uint64(offset) >= start && uint64(offset) < end {
			return max(rangeLine, 0)
		}
		// The next entry starts at the next byte with its top bit set.
		for i++; i < len(table) && table[i]&0x80 == 0; i++ {
		}
	}
	return 0
}

// varint reads the location table's unsigned varint: 6 bits per byte,
// bit 6 set when more follow. It stops at the buffer's end, or after the
// bits of an int.
func varint(b []byte) uint32 {
	var v uint32
	for i, shift := 0, uint(0); i < len(b) && shift < 32; i, shift = i+1, shift+6 {
		v |= uint32(b[i]&63) << shift
		if b[i]&64 == 0 {
			break
		}
	}
	return v
}

// signedVarint reads a varint whose low bit is the sign.
func signedVarint(b []byte) int32 {
	u := varint(b)
	if u&1 != 0 {
		return -int32(u >> 1)
	}
	return int32(u >> 1)
}
