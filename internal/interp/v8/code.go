package v8

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// errNoCode is returned for an address in no code object V8 has now.
var errNoCode = errors.New("no code object at the address")

// maxScan bounds the bytes looked through, from an address down, for the
// start of the code object that holds it.
const maxScan = 1 << 20

// codeHeader is a Code object's fixed part, as read.
type codeHeader struct {
	raw []byte
	// addr is the Code object (tagged).
	addr uint64
	// start and size bound its instructions.
	start, size uint64
	kind        uint32
	// stream is its InstructionStream (tagged).
	stream uint64
}

// readCodeHeader reads the Code object code (tagged).
func (h *heap) readCodeHeader(code uint64) (*codeHeader, error) {
	l := h.l
	raw := make([]byte, l.codeInstructionSize+8)
	if err := h.read(code, 0, raw); err != nil {
		return nil, err
	}
	c := &codeHeader{
		raw:    raw,
		addr:   code,
		stream: le64(raw, l.codeInstructionStream),
		start:  le64(raw, l.codeInstructionStart),
		size:   uint64(le32(raw, l.codeInstructionSize)),
		kind:   le32(raw, l.codeFlags) & l.codeKindMask >> l.codeKindShift,
	}
	return c, nil
}

// streamOf checks that the InstructionStream whose instructions start at
// start belongs to a Code object, which it returns; the map word of the
// stream is returned too, to recognise other streams by.
func (h *heap) streamOf(start uint64) (*codeHeader, uint64, error) {
	l := h.l
	if start < l.istreamHeader {
		return nil, 0, errNoCode
	}
	stream := start - l.istreamHeader + 1
	var hdr [16]byte
	if err := h.read(stream, 0, hdr[:]); err != nil {
		return nil, 0, err
	}
	smap := binary.LittleEndian.Uint64(hdr[l.heapMap:])
	code := binary.LittleEndian.Uint64(hdr[l.istreamCode:])
	if !isHeapObject(smap) || !isHeapObject(code) {
		return nil, 0, errNoCode
	}
	c, err := h.readCodeHeader(code)
	if err != nil {
		return nil, 0, err
	}
	if c.stream != stream || c.start != start || c.size == 0 || c.size > maxCodeBytes {
		return nil, 0, errNoCode
	}
	return c, smap, nil
}

// findCode finds the Code object whose instructions hold pc: it looks
// down from pc for an InstructionStream's header (its map, then its Code)
// and checks that the Code points back at it and covers pc. streamMap,
// when known, is the map every InstructionStream has: the words that are
// not it are skipped without a read. It returns the Code and the map.
func (h *heap) findCode(pc, streamMap uint64) (*codeHeader, uint64, error) {
	l := h.l
	if h.l.istreamHeader%8 != 0 || h.l.istreamCode+8 > h.l.istreamHeader {
		return nil, 0, errNoCode
	}
	// Read a page at a time, from the one holding pc down: a page is
	// mapped whole or not at all.
	const page = 4096
	buf := make([]byte, page)
	// Instructions start 8-byte aligned: candidate starts are multiples
	// of 8 below pc.
	end := pc &^ 7
	for scanned := uint64(0); scanned < maxScan && end > page; {
		base := (end - 1) &^ (page - 1)
		b := buf[:end-base]
		if err := h.mem.Read(base, b); err != nil {
			return nil, 0, err
		}
		for i := len(b) - 8; i >= 0; i -= 8 {
			word := binary.LittleEndian.Uint64(b[i:])
			if streamMap != 0 && word != streamMap || !isHeapObject(word) {
				continue
			}
			stream := base + uint64(i)
			c, smap, err := h.streamOf(stream + l.istreamHeader)
			if err != nil {
				continue
			}
			if pc >= c.start && pc < c.start+c.size {
				return c, smap, nil
			}
			// The stream below pc ends before it: pc is in no code.
			return nil, smap, errNoCode
		}
		scanned += end - base
		end = base
	}
	return nil, streamMap, fmt.Errorf("no code object within %d bytes below %#x: %w", maxScan, pc, errNoCode)
}

// codeFunction returns the SharedFunctionInfo (tagged) optimized code c
// was compiled for, from its deoptimization data.
func (h *heap) codeFunction(c *codeHeader) (uint64, error) {
	deopt := le64(c.raw, h.l.codeDeopt)
	n, err := h.length(deopt)
	if err != nil {
		return 0, err
	}
	if n <= h.l.deoptSFI {
		return 0, errNoCode
	}
	return h.word(deopt, h.l.fixedData+8*h.l.deoptSFI)
}
