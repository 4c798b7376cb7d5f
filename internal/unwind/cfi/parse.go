package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Bounds that keep a corrupt file from costing unbounded memory or time.
const (
	// maxSectionBytes bounds a CFI section read into memory. node's
	// .eh_frame, among the largest seen, is 2.7 MiB.
	maxSectionBytes = 64 << 20
	// maxStateStack bounds DW_CFA_remember_state nesting; compilers nest
	// one or two deep.
	maxStateStack = 64
	// maxAugmentation bounds a CIE's augmentation string.
	maxAugmentation = 16
)

var errTruncated = errors.New("truncated")

// reader decodes the little-endian, LEB128 and pointer-encoded values of
// a CFI section. It never panics: a read past the end sets err and returns
// zero, and every later read fails too.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.off = len(r.b)
}

func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > r.left() {
		r.fail(errTruncated)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) u8() uint8 {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u16() uint16 {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (r *reader) u32() uint32 {
	b := r.bytes(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *reader) u64() uint64 {
	b := r.bytes(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// uleb reads an unsigned LEB128; bits beyond 64 are an error.
func (r *reader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift >= 64 || (shift == 63 && c&0x7e != 0) {
			r.fail(errors.New("LEB128 overflows 64 bits"))
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

// sleb reads a signed LEB128.
func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	for {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift >= 64 {
			r.fail(errors.New("LEB128 overflows 64 bits"))
			return 0
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

// cstring reads a NUL-terminated string of at most max bytes.
func (r *reader) cstring(max int) string {
	for i := r.off; i < len(r.b) && i-r.off <= max; i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail(errors.New("unterminated or overlong string"))
	return ""
}

// Pointer encodings (DW_EH_PE_*) of .eh_frame.
const (
	peAbsptr  = 0x00
	peULEB128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSLEB128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePCRel   = 0x10
	peTextRel = 0x20
	peDataRel = 0x30
	peFuncRel = 0x40
	peAligned = 0x50

	peIndirect = 0x80
	peOmit     = 0xff
)

// bases are the addresses pointer encodings are relative to.
type bases struct {
	// section is the ELF virtual address of the first byte of the
	// section being read, for pcrel.
	section uint64
	// data is the base of datarel; hasData is false when unknown.
	data    uint64
	hasData bool
}

// encoded reads a pointer in encoding enc. Only the value format is used
// when app is false (FDE address ranges). Indirect pointers are refused
// for addresses, since they would need the loaded image.
func (r *reader) encoded(enc uint8, b *bases, app bool) (uint64, error) {
	if enc == peOmit {
		return 0, errors.New("omitted pointer where one is required")
	}
	pos := b.section + uint64(r.off)
	var v uint64
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v = r.u64()
	case peULEB128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peSLEB128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	default:
		return 0, fmt.Errorf("pointer format %#x not supported", enc&0x0f)
	}
	if r.err != nil {
		return 0, r.err
	}
	if !app {
		return v, nil
	}
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		v += pos
	case peDataRel:
		if !b.hasData {
			return 0, errors.New("datarel pointer with no data base")
		}
		v += b.data
	default:
		return 0, fmt.Errorf("pointer application %#x not supported", enc&0x70)
	}
	if enc&peIndirect != 0 {
		return 0, errors.New("indirect pointer not supported")
	}
	return v, nil
}

// skipEncoded skips a pointer in encoding enc without interpreting it
// (personality routines).
func (r *reader) skipEncoded(enc uint8) error {
	if enc == peOmit {
		return nil
	}
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		r.bytes(8)
	case peULEB128:
		r.uleb()
	case peUdata2, peSdata2:
		r.bytes(2)
	case peUdata4, peSdata4:
		r.bytes(4)
	case peSLEB128:
		r.sleb()
	default:
		return fmt.Errorf("pointer format %#x not supported", enc&0x0f)
	}
	return r.err
}

// cie is a parsed Common Information Entry.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fdeEnc    uint8
	hasAug    bool // 'z': FDEs carry an augmentation data length
	signal    bool // 'S'
	addrSize  int
	initial   []byte
	err       error // set when the CIE cannot be used; its FDEs are skipped
}

// fde is an FDE header; its instructions are run only after all FDEs are
// sorted, so that rows are appended in address order. A large file has
// 100k FDEs, so the instructions are held as offsets into the section
// (which maxSectionBytes keeps below 4 GiB) rather than as a slice.
type fde struct {
	begin, end       uint64
	cie              *cie
	insnOff, insnEnd uint32
}

// insns returns f's instructions in data, the section f was parsed from.
func (f *fde) insns(data []byte) []byte { return data[f.insnOff:f.insnEnd] }

// sectionKind tells .eh_frame from .debug_frame: they differ in CIE ids,
// CIE pointers and pointer encodings.
type sectionKind uint8

const (
	ehFrame sectionKind = iota
	debugFrame
)

// parseStats counts what a parse skipped, for tests and diagnostics.
type parseStats struct {
	fdes, badCIEs, badFDEs, outside, overlaps int
}

// parseSection splits a .eh_frame or .debug_frame into FDEs with their
// CIEs. Entries that cannot be parsed are skipped (and counted) as long as
// their length lets the walk go on; a bad length ends the walk with an
// error, keeping what was found before it.
func parseSection(data []byte, kind sectionKind, b *bases, st *parseStats) ([]fde, error) {
	if len(data) > maxSectionBytes {
		return nil, fmt.Errorf("section of %d bytes exceeds the %d byte bound", len(data), maxSectionBytes)
	}
	cies := make(map[int]*cie)
	// Sized by a first walk over the entries' lengths: grown by append,
	// the slice and its discarded copies took twice its size.
	fdes := make([]fde, 0, countEntries(data, kind))
	r := &reader{b: data}
	for r.left() > 0 {
		start := r.off
		length := uint64(r.u32())
		dwarf64 := false
		if length == 0xffffffff {
			length = r.u64()
			dwarf64 = true
		}
		if r.err != nil {
			return fdes, fmt.Errorf("reading entry length at %#x: %w", start, r.err)
		}
		if length == 0 {
			if kind == ehFrame {
				break // the terminator
			}
			continue
		}
		if length > uint64(r.left()) {
			return fdes, fmt.Errorf("reading entry at %#x: length %#x past the section end", start, length)
		}
		end := r.off + int(length)
		er := &reader{b: data[:end], off: r.off}
		r.off = end

		idPos := er.off
		var id uint64
		if dwarf64 {
			id = er.u64()
		} else {
			id = uint64(er.u32())
		}
		if er.err != nil {
			st.badFDEs++
			continue
		}
		isCIE := false
		cieOff := 0
		switch kind {
		case ehFrame:
			isCIE = id == 0
			if !isCIE {
				if id > uint64(idPos) {
					st.badFDEs++
					continue
				}
				cieOff = idPos - int(id)
			}
		case debugFrame:
			isCIE = id == 0xffffffff || id == math.MaxUint64
			if !isCIE {
				if id >= uint64(len(data)) {
					st.badFDEs++
					continue
				}
				cieOff = int(id)
			}
		}
		if isCIE {
			c := parseCIE(er, kind)
			if c.err != nil {
				st.badCIEs++
			}
			cies[start] = c
			continue
		}
		c, ok := cies[cieOff]
		if !ok {
			// A CIE after its FDE is legal in .debug_frame.
			c = parseCIEAt(data, cieOff, kind)
			if c.err != nil {
				st.badCIEs++
			}
			cies[cieOff] = c
		}
		if c.err != nil {
			st.badFDEs++
			continue
		}
		f, err := parseFDE(er, c, kind, b)
		if err != nil {
			st.badFDEs++
			continue
		}
		st.fdes++
		if f.end > f.begin {
			fdes = append(fdes, f)
		}
	}
	return fdes, nil
}

// countEntries returns how many entries (CIEs and FDEs) parseSection's
// walk over data can visit: a bound on the FDEs it returns.
func countEntries(data []byte, kind sectionKind) int {
	n := 0
	r := &reader{b: data}
	for r.left() > 0 {
		length := uint64(r.u32())
		if length == 0xffffffff {
			length = r.u64()
		}
		if r.err != nil || length > uint64(r.left()) {
			break
		}
		if length == 0 && kind == ehFrame {
			break
		}
		if length > 0 {
			n++
		}
		r.off += int(length)
	}
	return n
}

// parseCIEAt parses the CIE whose entry starts at off.
func parseCIEAt(data []byte, off int, kind sectionKind) *cie {
	r := &reader{b: data, off: off}
	length := uint64(r.u32())
	dwarf64 := false
	if length == 0xffffffff {
		length = r.u64()
		dwarf64 = true
	}
	if r.err != nil || length == 0 || length > uint64(r.left()) {
		return &cie{err: errors.New("CIE pointer to a bad entry")}
	}
	er := &reader{b: data[:r.off+int(length)], off: r.off}
	var id uint64
	if dwarf64 {
		id = er.u64()
	} else {
		id = uint64(er.u32())
	}
	want := uint64(0)
	if kind == debugFrame {
		want = 0xffffffff
		if dwarf64 {
			want = math.MaxUint64
		}
	}
	if er.err != nil || id != want {
		return &cie{err: errors.New("CIE pointer to an entry that is no CIE")}
	}
	return parseCIE(er, kind)
}

// parseCIE parses a CIE body after its id.
func parseCIE(r *reader, kind sectionKind) *cie {
	c := &cie{addrSize: 8}
	version := r.u8()
	if version != 1 && version != 3 && version != 4 {
		c.err = fmt.Errorf("CIE version %d not supported", version)
		return c
	}
	aug := r.cstring(maxAugmentation)
	if version == 4 {
		c.addrSize = int(r.u8())
		if seg := r.u8(); seg != 0 {
			c.err = errors.New("segmented addresses not supported")
			return c
		}
		if c.addrSize != 4 && c.addrSize != 8 {
			c.err = fmt.Errorf("address size %d not supported", c.addrSize)
			return c
		}
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	c.fdeEnc = peAbsptr
	if kind == debugFrame && c.addrSize == 4 {
		c.fdeEnc = peUdata4
	}
	if aug == "S" {
		// .debug_frame marks signal frames without 'z' (GNU as).
		c.signal = true
	} else if aug != "" {
		if aug[0] != 'z' {
			c.err = fmt.Errorf("augmentation %q not supported", aug)
			return c
		}
		c.hasAug = true
		n := r.uleb()
		if r.err != nil || n > uint64(r.left()) {
			c.err = errors.New("augmentation data past the entry")
			return c
		}
		ar := &reader{b: r.b[:r.off+int(n)], off: r.off}
		r.off += int(n)
	letters:
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.fdeEnc = ar.u8()
			case 'L':
				ar.u8() // LSDA encoding; the LSDA itself is skipped via 'z'
			case 'P':
				if err := ar.skipEncoded(ar.u8()); err != nil {
					c.err = fmt.Errorf("reading personality: %w", err)
					return c
				}
			case 'S':
				c.signal = true
			case 'B', 'G':
				// No data (AArch64 BTI, memory tagging).
			default:
				// The rest of the data is skipped by length; an unknown
				// letter only matters if 'R' came after it.
				break letters
			}
		}
		if ar.err != nil {
			c.err = fmt.Errorf("reading augmentation data: %w", ar.err)
			return c
		}
	}
	if r.err != nil {
		c.err = fmt.Errorf("reading CIE: %w", r.err)
		return c
	}
	if c.codeAlign == 0 || c.codeAlign > 1<<16 {
		c.err = fmt.Errorf("code alignment factor %d not supported", c.codeAlign)
		return c
	}
	if c.dataAlign < -(1<<16) || c.dataAlign > 1<<16 {
		c.err = fmt.Errorf("data alignment factor %d not supported", c.dataAlign)
		return c
	}
	c.initial = r.b[r.off:]
	return c
}

// parseFDE parses an FDE body after its CIE pointer.
func parseFDE(r *reader, c *cie, kind sectionKind, b *bases) (fde, error) {
	begin, err := r.encoded(c.fdeEnc, b, true)
	if err != nil {
		return fde{}, fmt.Errorf("reading FDE start: %w", err)
	}
	size, err := r.encoded(c.fdeEnc&0x0f, b, false)
	if err != nil {
		return fde{}, fmt.Errorf("reading FDE size: %w", err)
	}
	if c.hasAug {
		n := r.uleb()
		r.bytes(int(min(n, math.MaxInt32)))
	}
	if r.err != nil {
		return fde{}, fmt.Errorf("reading FDE: %w", r.err)
	}
	if begin+size < begin {
		return fde{}, errors.New("FDE range wraps around")
	}
	return fde{begin: begin, end: begin + size, cie: c, insnOff: uint32(r.off), insnEnd: uint32(len(r.b))}, nil
}
