package v8

import (
	"errors"
	"fmt"
)

// errNoBytecodeSizes is returned for a baseline frame of a binary whose
// bytecode lengths are unknown.
var errNoBytecodeSizes = errors.New("bytecode lengths unknown")

// baselineOffset returns the bytecode offset that pc, in the baseline
// (Sparkplug) Code c, runs. Baseline code follows its bytecode one
// bytecode after another; its bytecode offset table holds the length of
// the machine code of each (V8's BytecodeOffsetIterator), the first
// being the prologue's.
func (h *heap) baselineOffset(c *codeHeader, pc uint64) (uint32, error) {
	l := h.l
	if l.bytecodeSizes[0] == nil {
		return 0, errNoBytecodeSizes
	}
	bc := le64(c.raw, l.codeBytecodeArray)
	if t, err := h.typeOf(bc); err == nil && t == l.typeInterpreterData {
		if bc, err = h.word(bc, l.interpreterDataBytecode); err != nil {
			return 0, err
		}
	}
	if err := h.expect(bc, l.typeBytecodeArray); err != nil {
		return 0, err
	}
	n, err := h.length(bc)
	if err != nil {
		return 0, err
	}
	if n > maxTableLen {
		return 0, fmt.Errorf("bytecode of %d bytes, more than %d", n, maxTableLen)
	}
	code, err := h.readLong(bc-1+l.bytecodeData, n)
	if err != nil {
		return 0, err
	}
	offsets, err := h.byteArray(le64(c.raw, l.codeBytecodeOffset), l.typeByteArray, maxTableLen)
	if err != nil {
		return 0, err
	}
	return baselineMap(offsets, code, &l.bytecodeSizes, pc-c.start)
}

// baselineMap walks a baseline code's offset table and its bytecode to
// the bytecode whose machine code holds offset off; the prologue maps to
// the first bytecode.
func baselineMap(offsets, code []byte, sizes *[3][]byte, off uint64) (uint32, error) {
	i := 0
	end, err := vlq(offsets, &i)
	if err != nil {
		return 0, err
	}
	if off < end {
		return 0, nil
	}
	cur := 0
	for cur < len(code) {
		d, err := vlq(offsets, &i)
		if err != nil {
			return 0, err
		}
		end += d
		if off < end {
			return uint32(cur), nil
		}
		n := bytecodeLength(code[cur:], sizes)
		if n <= 0 {
			return 0, errTable
		}
		cur += n
	}
	return 0, errTable
}

// bytecodeLength is the length of the bytecode at the start of b, its
// scaling prefix included; 0 when it cannot be read.
func bytecodeLength(b []byte, sizes *[3][]byte) int {
	if len(b) == 0 {
		return 0
	}
	scale, prefix := 0, 0
	switch b[0] {
	case bytecodeWide, bytecodeDebugBreakWide:
		scale, prefix = 1, 1
	case bytecodeExtraWide, bytecodeDebugBreakExtraWd:
		scale, prefix = 2, 1
	}
	if prefix >= len(b) {
		return 0
	}
	op := int(b[prefix])
	if op >= len(sizes[scale]) {
		return 0
	}
	return prefix + int(sizes[scale][op])
}
