package v8

import "errors"

// errTable is returned for a position table that does not decode.
var errTable = errors.New("a malformed position table")

// position is one entry of a source position table: from code offset
// (machine code or bytecode) on, the source position pos.
type position struct {
	code uint32
	pos  uint64
}

// vlq reads one variable-length quantity of b at *i: 7 bits a byte, the
// least significant first, the high bit set on all but the last.
func vlq(b []byte, i *int) (uint64, error) {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		if *i >= len(b) {
			return 0, errTable
		}
		c := b[*i]
		*i++
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errTable
}

// zigzag decodes a signed value from its VLQ: the sign in the low bit.
func zigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// decodePositions decodes a source position table (V8's
// SourcePositionTableBuilder): pairs of deltas from the previous entry,
// the code offset's (negative for a statement position: -delta-1) and
// the source position's. At most limit entries are kept.
func decodePositions(b []byte, limit int) ([]position, error) {
	var out []position
	code, pos := int64(-1), int64(0)
	for i := 0; i < len(b); {
		u, err := vlq(b, &i)
		if err != nil {
			return nil, err
		}
		d := zigzag(u)
		if d < 0 {
			d = -d - 1
		}
		code += d
		u, err = vlq(b, &i)
		if err != nil {
			return nil, err
		}
		pos += zigzag(u)
		// A bytecode table may start at -1, the function's entry: it
		// holds at offset 0 until an entry there.
		at := max(code, 0)
		if code < -1 || code > 1<<31 || (len(out) > 0 && uint32(at) < out[len(out)-1].code) {
			return nil, errTable
		}
		if len(out) == limit {
			return nil, errTable
		}
		out = append(out, position{code: uint32(at), pos: uint64(pos)})
	}
	return out, nil
}

// at returns the index of the entry of ps, sorted by code offset, in
// force at offset off: the last at or before it; -1 when none is.
func at(ps []position, off uint32) int {
	lo, hi := 0, len(ps)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ps[m].code <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// scriptOffset returns a source position's offset in its script, -1 for
// an external position or none.
func scriptOffset(pos uint64) int64 {
	if pos&posExternalBit != 0 {
		return -1
	}
	return int64(pos>>posOffsetShift&posOffsetMask) - 1
}

// inliningID returns the inlining a source position belongs to: 0 for
// the code's own function, k for the k-th inlining position.
func inliningID(pos uint64) uint32 { return uint32(pos >> posInliningShift & posInliningMask) }
