package dwarfsym

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/symbolize/sections"
)

// dwarfSources is what newDWARFTable reads: the parsed DWARF and the raw
// .debug_info, whose unit headers say where each compile unit starts.
type dwarfSources struct {
	// data is the whole DWARF, set only for object files (relocated by
	// debug/elf); otherwise fullData builds it when a unit needs it.
	data   *dwarf.Data
	sects  [len(dwarfSectionNames)][]byte
	info   []byte
	ranges []byte // .debug_ranges (DWARF 2 to 4)
	abbrev []byte // .debug_abbrev, whose size says what debug/dwarf parses
	// aranges is .debug_aranges, which indexes units by address without
	// parsing them; only the indexing reads it.
	aranges []byte
	order   binary.ByteOrder
	// heapBytes is what the sections take on the heap: decompressed ones;
	// the others are the mapped file.
	heapBytes int64
}

// dwarfSectionNames are the sections a lookup needs, and the address index
// (aranges, last). Location lists, call frame information and type units
// are left out: in Go and large C++ binaries they are much of the DWARF,
// and decompressing them is wasted.
var dwarfSectionNames = [...]string{"abbrev", "info", "str", "line", "ranges", "addr", "line_str", "rnglists", "str_offsets", "aranges"}

// arangesSection is the index of aranges in dwarfSectionNames, which
// debug/dwarf does not read.
const arangesSection = len(dwarfSectionNames) - 1

// loadDWARFSources reads the sections lookups need from f.
func loadDWARFSources(f *elf.File) (dwarfSources, error) {
	return loadDWARFImage(sections.Image{F: f})
}

// loadDWARFImage takes the sections lookups need from the mapped file, and
// decompresses (zlib, zstd, .zdebug) those stored compressed, in parallel.
func loadDWARFImage(img sections.Image) (dwarfSources, error) {
	f := img.F
	if f.Type == elf.ET_REL {
		// Object files need relocations applied; debug/elf does that.
		d, err := f.DWARF()
		if err != nil {
			return dwarfSources{}, err
		}
		var info []byte
		if s := f.Section(".debug_info"); s != nil {
			info, _ = s.Data()
		}
		// Relocated copies of every section: count them all twice over.
		var heap int64
		for _, s := range f.Sections {
			if strings.HasPrefix(s.Name, ".debug_") {
				heap += 2 * int64(s.Size)
			}
		}
		return dwarfSources{data: d, info: info, order: f.ByteOrder, heapBytes: heap}, nil // ranges through debug/dwarf
	}
	var sects [len(dwarfSectionNames)]*elf.Section
	for _, s := range f.Sections {
		suffix, ok := strings.CutPrefix(s.Name, ".debug_")
		if !ok {
			if suffix, ok = strings.CutPrefix(s.Name, ".zdebug_"); !ok {
				continue
			}
		}
		if i := slices.Index(dwarfSectionNames[:], suffix); i >= 0 && sects[i] == nil {
			sects[i] = s
		}
	}
	var (
		data [len(dwarfSectionNames)][]byte
		errs [len(dwarfSectionNames)]error
		wg   sync.WaitGroup
		// heapBytes counts decompressed sections, which the heap holds.
		heapBytes atomic.Int64
	)
	for i, s := range sects {
		if s == nil {
			continue
		}
		wg.Go(func() {
			// A fault guard is per goroutine: a file truncated under
			// its mapping must fail this read, not end the process.
			defer elfbin.GuardFaults()()
			defer func() {
				if r := recover(); r != nil {
					errs[i] = elfbin.Recovered(r, "reading "+s.Name)
				}
			}()
			b, heap, err := img.Section(s)
			if err != nil && uint64(len(b)) < s.Size {
				errs[i] = fmt.Errorf("reading %s: %w", s.Name, err)
			}
			data[i] = b
			if heap {
				heapBytes.Add(int64(cap(b)))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return dwarfSources{}, err
	}
	src := dwarfSources{sects: data, info: data[1], ranges: data[4], abbrev: data[0], aranges: data[arangesSection], order: f.ByteOrder, heapBytes: heapBytes.Load()}
	if len(src.info) == 0 {
		return dwarfSources{}, errors.New("empty .debug_info")
	}
	return src, nil
}

// newData returns a debug/dwarf reader of the sections with info as
// .debug_info. debug/dwarf reads every unit header and parses every unit's
// abbreviation table up front, and keeps them.
func (src *dwarfSources) newData(info []byte) (*dwarf.Data, error) {
	d := src.sects
	dd, err := dwarf.New(d[0], nil, nil, info, d[3], nil, d[4], d[2])
	if err != nil {
		return nil, err
	}
	for i := 5; i < len(d); i++ {
		if d[i] != nil && i != arangesSection {
			if err := dd.AddSection(".debug_"+dwarfSectionNames[i], d[i]); err != nil {
				return nil, err
			}
		}
	}
	return dd, nil
}

// fullData returns a reader of the whole DWARF. Seeking to each of units
// has debug/dwarf decode a DWARF 5 unit's base offsets here, once, before
// lookups share the reader (it would write them on first use).
func (src *dwarfSources) fullData(units []unitStart) (*dwarf.Data, error) {
	d := src.data
	if d == nil {
		var err error
		if d, err = src.newData(src.info); err != nil {
			return nil, err
		}
	}
	r := d.Reader()
	for _, u := range units {
		r.Seek(u.off)
	}
	return d, nil
}

// cost is the heap the sections hold: the decompressed ones, and for an
// object file the whole relocated DWARF with its reader.
func (src *dwarfSources) cost(units int) int64 {
	c := src.heapBytes + int64(unsafe.Sizeof(*src))
	if src.data != nil {
		c += src.fullDataCost(units)
	}
	return c
}

// fullDataCost is the heap fullData's reader holds for units units,
// beyond the sections.
func (src *dwarfSources) fullDataCost(units int) int64 {
	return int64(units)*dwarfUnitOverhead + abbrevHeapFactor*int64(len(src.abbrev))
}

// unitData returns a reader that holds unit u alone, at its offset in
// .debug_info, so that debug/dwarf parses one abbreviation table instead
// of every unit's. The bytes before u are one placeholder unit of zero
// pages (mapped, never touched); u is copied after it. ok is false when u
// cannot be read alone: it refers to DIEs of other units (DW_FORM_ref_addr,
// as Go and LTO builds do), or its header is not one we can place. release
// frees the copy; nothing read from the reader may be used after it.
func (src *dwarfSources) unitData(u unitStart) (d *dwarf.Data, release func(), ok bool) {
	if !src.readsAlone(u) {
		return nil, nil, false
	}
	if u.hdr == 0 {
		// The first unit needs no placeholder: the sections up to its
		// end hold it alone, read in place.
		d, err := src.newData(src.info[:u.end:u.end])
		if err != nil {
			return nil, nil, false
		}
		return d, func() {}, true
	}
	buf, err := anonMap(u.end)
	if err != nil {
		return nil, nil, false
	}
	release = func() { anonUnmap(buf) }
	// A DWARF 4 header covering [0, hdr): length, version, abbreviation
	// offset (u's, so one table is parsed), address size.
	src.order.PutUint32(buf, uint32(u.hdr-4))
	src.order.PutUint16(buf[4:], 4)
	src.order.PutUint32(buf[6:], uint32(u.abbrevOff))
	buf[10] = u.addrSize
	copy(buf[u.hdr:u.end], src.info[u.hdr:u.end])
	d, err = src.newData(buf[:u.end])
	if err != nil {
		release()
		return nil, nil, false
	}
	return d, release, true
}

// readsAlone reports whether unitData can read u alone.
func (src *dwarfSources) readsAlone(u unitStart) bool {
	if src.data != nil || refersToOtherUnits(src.abbrev, u.abbrevOff) {
		return false
	}
	if u.hdr == 0 {
		return u.end <= len(src.info)
	}
	return u.hdr >= 11 && !u.is64 && u.hdr-4 < 0xfffffff0 && u.addrSize != 0
}

// refersToOtherUnits reports whether the abbreviation table at off uses a
// form that refers outside its unit, or cannot be read.
func refersToOtherUnits(abbrev []byte, off uint64) bool {
	if off >= uint64(len(abbrev)) {
		return true
	}
	b := abbrev[off:]
	uleb := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	for range 1 << 16 {
		code, ok := uleb()
		if !ok {
			return true
		}
		if code == 0 {
			return false
		}
		if _, ok := uleb(); !ok || len(b) == 0 { // tag, then children
			return true
		}
		b = b[1:]
		for {
			attr, ok1 := uleb()
			form, ok2 := uleb()
			if !ok1 || !ok2 {
				return true
			}
			if attr == 0 && form == 0 {
				break
			}
			switch form {
			case 0x10, 0x1c, 0x24, 0x1f20, 0x1f21: // ref_addr, ref_sup4, ref_sup8, GNU_ref_alt, GNU_strp_alt
				return true
			case 0x21: // implicit_const: a SLEB128 value follows
				if b = skipLEB128(b); b == nil {
					return true
				}
			}
		}
	}
	return true
}

// skipLEB128 returns b after the LEB128 number it starts with, nil if it
// does not hold a whole one of at most 10 bytes. The value is not decoded:
// binary.Varint, a zigzag decoder, takes a 10-byte SLEB128 such as
// -2^63+1 (in CPython 3.11's and 3.12's libpython) for an overflow.
func skipLEB128(b []byte) []byte {
	for i := 0; i < len(b) && i < 10; i++ {
		if b[i] < 0x80 {
			return b[i+1:]
		}
	}
	return nil
}

// unitStart is where a unit's first DIE is, its DWARF version, and what
// unitData needs: where its header starts, where it ends, its abbreviation
// table and address size.
type unitStart struct {
	off       dwarf.Offset
	vers      uint16
	hdr, end  int
	is64      bool
	abbrevOff uint64
	addrSize  uint8
}

// unitDIEOffsets returns the offset of each unit's first DIE in .debug_info,
// reading the unit headers as debug/dwarf does.
func unitDIEOffsets(info []byte, order binary.ByteOrder) []unitStart {
	var offs []unitStart
	for off := 0; len(info)-off >= 4; {
		n := uint64(order.Uint32(info[off:]))
		off += 4
		is64 := false
		switch {
		case n == 0xffffffff:
			if len(info)-off < 8 {
				return offs
			}
			n, is64 = order.Uint64(info[off:]), true
			off += 8
		case n >= 0xfffffff0:
			return offs
		}
		if n == 0 {
			continue // padding
		}
		if n > uint64(len(info)-off) {
			return offs
		}
		end := off + int(n)
		word := 4
		if is64 {
			word = 8
		}
		if end-off < 2 {
			return offs
		}
		hdr := 2
		vers := order.Uint16(info[off:])
		u := unitStart{vers: vers, is64: is64, end: end}
		u.hdr = off - 4
		if is64 {
			u.hdr -= 8
		}
		readWord := func(at int) uint64 {
			if is64 {
				return order.Uint64(info[at:])
			}
			return uint64(order.Uint32(info[at:]))
		}
		if vers >= 5 {
			if end-off < 4+word {
				return offs
			}
			u.addrSize, u.abbrevOff = info[off+3], readWord(off+4)
			hdr += 2 + word
			switch info[off+2] { // unit type
			case 4, 5: // skeleton, split compile: unit ID
				hdr += 8
			case 2, 6: // type, split type: signature and type offset
				hdr += 8 + word
			}
		} else {
			if end-off < 3+word {
				return offs
			}
			u.abbrevOff, u.addrSize = readWord(off+2), info[off+2+word]
			hdr += word + 1
		}
		if hdr < end-off {
			u.off = dwarf.Offset(off + hdr)
			offs = append(offs, u)
		}
		off = end
	}
	return offs
}

// dwarfUnitOverhead is what debug/dwarf holds per unit beyond its
// abbreviations: the unit record and the map of its abbreviation table.
const dwarfUnitOverhead = 512

// abbrevHeapFactor is the heap debug/dwarf takes per byte of
// .debug_abbrev: an attribute spec of two or three bytes becomes a 32-byte
// record, an abbreviation of a few bytes a map entry with a slice header.
const abbrevHeapFactor = 16
