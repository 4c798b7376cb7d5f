package dwarfsym

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/symbolize/sections"
)

// Index answers lookups from a binary's DWARF one compile unit at a
// time: the units are indexed by address range, and only the unit an
// address falls in is parsed. The sections with that index, and each
// parsed unit, are entries of the binary's Cache, parsed again from the
// mapped file when evicted.
type Index struct {
	cache Cache
	data  []byte // the mapped file, nil if none
	// spill holds the sections decompressed to disk, whose pages a parse
	// read leave the RSS after it, like data's; nil when none is.
	spill Spill
	load  func() (dwarfSources, error)
	// prefix reads compressed DWARF only as far as lookups need, until
	// the whole index is built; nil when there is none.
	prefix atomic.Pointer[dwarfPrefix]
}

// Open indexes the DWARF of img, whose tables cache holds and whose
// compressed sections spill decompresses (nil: into the heap). Compressed
// DWARF that can be read by prefix is indexed as lookups need it; other
// DWARF has its units indexed now.
func Open(img sections.Image, cache Cache, spill Spill) (*Index, error) {
	if !Has(img.F) {
		return nil, errors.New("no DWARF sections")
	}
	x := &Index{cache: cache, data: img.Data, spill: spill, load: func() (dwarfSources, error) {
		defer elfbin.GuardFaults()()
		return loadDWARFImage(img)
	}}
	if p := newDWARFPrefix(img, spill); p != nil {
		// The whole index waits for a lookup the prefix cannot answer.
		x.prefix.Store(p)
		return x, nil
	}
	if _, err := x.units(); err != nil {
		return nil, fmt.Errorf("reading DWARF: %w", err)
	}
	return x, nil
}

// Has reports whether f carries DWARF debug info.
func Has(f *elf.File) bool {
	for _, name := range [...]string{".debug_info", ".zdebug_info"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			return true
		}
	}
	return false
}

// ByPrefix reports whether lookups are answered by prefix still.
func (x *Index) ByPrefix() bool { return x.prefix.Load() != nil }

// SectionsHeap returns the heap the index's DWARF sections take:
// nothing when they are read in place or spilled.
func (x *Index) SectionsHeap() (int64, error) {
	u, err := x.units()
	if err != nil {
		return 0, err
	}
	src := x.sources(u)
	if src == nil {
		return 0, errors.New("the DWARF sections cannot be read")
	}
	return src.heapBytes, nil
}

// dropPages takes the pages of the mapped file and of the spilled
// sections read so far out of the RSS.
func (x *Index) dropPages() {
	if x.spill != nil {
		x.spill.DropPages()
	}
}

// dwarfUnits is the DWARF of a binary with its units indexed by address.
type dwarfUnits struct {
	// src is the sections the index was built from, handed to the table
	// cache as an entry of their own (KindSections) after: decompressed
	// sections can be evicted and decompressed again while the index
	// stays.
	src    atomic.Pointer[dwarfSources]
	rel    bool // an object file: src.data is the whole DWARF, relocated
	units  []unitStart
	ranges []unitRange // sorted by lo
	// reach[i] is the largest hi of ranges[:i+1], so a backward scan for
	// ranges covering an address stops early.
	reach []uint64
	// alone[i] says unit i is read by a reader of its own (unitData);
	// the others need the reader of the whole DWARF, which then holds
	// the sections (KindFull instead of KindSections).
	alone     []bool
	needsFull bool
	cost      int64
	// full is the whole-DWARF reader the indexing built, handed to the
	// table cache after.
	full atomic.Pointer[dwarf.Data]
}

// unitRange is one address range of a compile unit.
type unitRange struct {
	lo, hi uint64
	unit   int32
}

// newDWARFUnits indexes the units of src by their address ranges: those
// .debug_aranges lists for them, as llvm-symbolizer takes them, else the
// ranges of their unit DIE (DW_AT_low_pc/high_pc or DW_AT_ranges). A unit
// with neither is parsed once and indexed by the ranges of its functions
// and line sequences. Each unit is read alone when it can be, so
// debug/dwarf never holds every unit's abbreviations at once.
func newDWARFUnits(src dwarfSources) (_ *dwarfUnits, err error) {
	defer func() {
		// debug/dwarf reports most corruption as errors, but a hostile
		// file must never take the profiler down.
		if r := recover(); r != nil {
			err = elfbin.Recovered(r, "decoding DWARF")
		}
	}()
	units := unitDIEOffsets(src.info, src.order)
	if len(units) > maxUnits {
		return nil, fmt.Errorf("decoding DWARF: %d units, more than %d", len(units), maxUnits)
	}
	if len(units) == 0 {
		return nil, errors.New("decoding DWARF: no compile units")
	}
	u := &dwarfUnits{units: units, alone: make([]bool, len(units)), rel: src.data != nil}
	// Only the indexing reads the address index.
	listed := arangesByUnit(src.aranges, src.order, units)
	src.aranges, src.sects[arangesSection] = nil, nil
	u.src.Store(&src)
	var full *dwarf.Data
	for i, start := range units {
		u.alone[i] = src.readsAlone(start)
		rs, ok := listed[int32(i)]
		if !ok {
			if rs, full, u.alone[i], err = unitRangesOf(&src, start, full, units); err != nil {
				return nil, err
			}
		}
		u.needsFull = u.needsFull || !u.alone[i]
		for _, rg := range rs {
			if rg[1] > rg[0] {
				u.ranges = append(u.ranges, unitRange{lo: rg[0], hi: rg[1], unit: int32(i)})
			}
		}
	}
	if full != nil && src.data == nil {
		u.full.Store(full)
	}
	u.sortRanges()
	u.cost = int64(cap(u.units))*int64(unsafe.Sizeof(unitStart{})) +
		int64(cap(u.ranges))*int64(unsafe.Sizeof(unitRange{})) + int64(cap(u.reach))*8 + int64(cap(u.alone))
	return u, nil
}

// unitRangesOf returns the address ranges of the unit at start, read
// alone or, when it cannot be (alone is false), through full, the
// whole-DWARF reader, built on first need and returned.
func unitRangesOf(src *dwarfSources, start unitStart, full *dwarf.Data, units []unitStart) (_ [][2]uint64, _ *dwarf.Data, alone bool, err error) {
	d, release, alone := src.unitData(start)
	if !alone {
		if full == nil {
			if full, err = src.fullData(units); err != nil {
				return nil, nil, false, err
			}
		}
		d, release = full, func() {}
	}
	rs, err := unitRanges(d, src, start)
	release()
	return rs, full, alone, err
}

// sortRanges sorts u's ranges by address and sets reach.
func (u *dwarfUnits) sortRanges() {
	slices.SortStableFunc(u.ranges, func(a, b unitRange) int { return cmp.Compare(a.lo, b.lo) })
	u.reach = make([]uint64, len(u.ranges))
	for i, rg := range u.ranges {
		u.reach[i] = rg.hi
		if i > 0 {
			u.reach[i] = max(rg.hi, u.reach[i-1])
		}
	}
}

// arangesByUnit reads .debug_aranges into the address ranges of each unit
// it has a set for, by index into units. A set naming no unit start is
// skipped; a malformed one ends the reading, and the units it did not
// reach are indexed from their DIEs.
func arangesByUnit(aranges []byte, order binary.ByteOrder, units []unitStart) map[int32][][2]uint64 {
	if len(aranges) == 0 {
		return nil
	}
	listed := map[int32][][2]uint64{}
	var i int
	arangeSets(aranges, order, func(infoOff uint64, addrSize int) ([][2]uint64, bool) {
		var found bool
		i, found = slices.BinarySearchFunc(units, infoOff, func(u unitStart, off uint64) int { return cmp.Compare(uint64(u.hdr), off) })
		if !found || units[i].addrSize != uint8(addrSize) {
			return nil, false
		}
		return listed[int32(i)], true
	}, func(rs [][2]uint64) { listed[int32(i)] = rs })
	return listed
}

// arangeSets reads the sets of .debug_aranges in order. For each set of
// a supported form, start says whether it is taken, returning the ranges
// to append its own to, and done gets them. A malformed set ends the
// reading.
func arangeSets(aranges []byte, order binary.ByteOrder, start func(infoOff uint64, addrSize int) ([][2]uint64, bool), done func(rs [][2]uint64)) {
	for off := 0; len(aranges)-off >= 4; {
		set := off
		n := uint64(order.Uint32(aranges[off:]))
		off += 4
		word := 4
		switch {
		case n == 0xffffffff:
			if len(aranges)-off < 8 {
				return
			}
			n, word = order.Uint64(aranges[off:]), 8
			off += 8
		case n >= 0xfffffff0:
			return
		}
		if n > uint64(len(aranges)-off) {
			return
		}
		end := off + int(n)
		if end-off < 2+word+2 {
			return
		}
		vers := order.Uint16(aranges[off:])
		var infoOff uint64
		if word == 8 {
			infoOff = order.Uint64(aranges[off+2:])
		} else {
			infoOff = uint64(order.Uint32(aranges[off+2:]))
		}
		addrSize, segSize := int(aranges[off+2+word]), aranges[off+3+word]
		if vers != 2 || segSize != 0 || (addrSize != 4 && addrSize != 8) {
			off = end
			continue
		}
		rs, ok := start(infoOff, addrSize)
		if !ok {
			off = end
			continue
		}
		// Tuples start at the first multiple of twice the address size
		// from the set's start.
		tuple := 2 * addrSize
		at := set + (off+4+word-set+tuple-1)/tuple*tuple
		for ; at+tuple <= end; at += tuple {
			lo, size := uint64(order.Uint32(aranges[at:])), uint64(order.Uint32(aranges[at+4:]))
			if addrSize == 8 {
				lo, size = order.Uint64(aranges[at:]), order.Uint64(aranges[at+8:])
			}
			if lo == 0 && size == 0 {
				break
			}
			if size > 0 && lo+size > lo {
				rs = append(rs, [2]uint64{lo, lo + size})
			}
		}
		done(rs)
		off = end
	}
}

// unitRanges returns the address ranges of the unit at start, read
// through d: its unit DIE's, else those of what it contains.
func unitRanges(d *dwarf.Data, src *dwarfSources, start unitStart) ([][2]uint64, error) {
	// This also has debug/dwarf decode a DWARF 5 unit's base offsets
	// here, once, before lookups share a whole-DWARF reader.
	r := d.Reader()
	r.Seek(start.off)
	cu, err := r.Next()
	if err != nil || cu == nil {
		return nil, nil
	}
	if cu.Tag != dwarf.TagCompileUnit && cu.Tag != tagPartialUnit && cu.Tag != tagSkeletonUnit {
		return nil, nil
	}
	if rs, err := d.Ranges(cu); err == nil && len(rs) > 0 {
		return rs, nil
	}
	t, err := newUnitReader(d, src).table(start)
	if err != nil {
		return nil, err
	}
	return t.extent(), nil
}

// covering returns the units whose ranges cover pc, in unit order.
func (u *dwarfUnits) covering(pc uint64, into []int32) []int32 {
	lo, hi := 0, len(u.ranges)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if u.ranges[m].lo > pc {
			hi = m
		} else {
			lo = m + 1
		}
	}
	for j := lo - 1; j >= 0 && u.reach[j] > pc; j-- {
		if pc < u.ranges[j].hi && !slices.Contains(into, u.ranges[j].unit) {
			into = append(into, u.ranges[j].unit)
		}
	}
	slices.Sort(into)
	return into
}

// newUnitReader returns a reader of units through d.
func newUnitReader(d *dwarf.Data, src *dwarfSources) *unitReader {
	w := &unitReader{d: d, rangesData: src.ranges, order: src.order, r: d.Reader()}
	w.names = &dwarfNames{d: d, r: d.Reader(), cache: map[dwarf.Offset]dieNames{}}
	return w
}

// table parses one unit into a table of its own.
func (w *unitReader) table(start unitStart) (*dwarfTable, error) {
	clear(w.names.cache)
	u := w.read(start)
	if u.err != nil {
		return nil, u.err
	}
	t, err := mergeUnits([]unitTables{u})
	if err != nil {
		// A unit with no code (types only): nothing to find in it.
		return &dwarfTable{size: 64}, nil
	}
	return t, nil
}

// extent returns the address ranges the table covers.
func (t *dwarfTable) extent() [][2]uint64 {
	var rs [][2]uint64
	for _, f := range t.funcs {
		rs = append(rs, [2]uint64{f.lo, f.hi()})
	}
	var start uint64
	open := false
	t.lines.each(func(row lineRow) {
		switch {
		case row.end() && open:
			rs = append(rs, [2]uint64{start, row.addr})
			open = false
		case !row.end() && !open:
			start, open = row.addr, true
		}
	})
	return rs
}

// units returns the indexed units, parsing them on first use or after
// eviction.
func (x *Index) units() (*dwarfUnits, error) {
	type result struct {
		u   *dwarfUnits
		err error
	}
	v := x.cache.Get(KindIndex, 0, x.data, func() (any, int64) {
		src, err := x.load()
		if err != nil {
			return result{err: err}, 0
		}
		u, err := newDWARFUnits(src)
		x.dropPages()
		if err != nil {
			return result{err: err}, 0
		}
		return result{u: u}, u.cost
	}).(result)
	if v.u != nil {
		if src := v.u.src.Swap(nil); src != nil {
			if full := v.u.full.Swap(nil); full != nil {
				f := &fullDWARF{data: full, src: src}
				x.cache.Add(KindFull, f, f.cost(len(v.u.units)))
			} else if !v.u.needsFull {
				x.cache.Add(KindSections, src, src.cost(len(v.u.units)))
			}
		}
	}
	return v.u, v.err
}

// fullDWARF is the reader of the whole DWARF with the sections it reads.
type fullDWARF struct {
	data *dwarf.Data
	src  *dwarfSources
}

func (f *fullDWARF) cost(units int) int64 { return f.src.cost(units) + f.src.fullDataCost(units) }

// full returns the whole-DWARF reader and its sections, building them
// again after eviction; nil when they cannot be read.
func (x *Index) full(u *dwarfUnits) *fullDWARF {
	return x.cache.Get(KindFull, 0, x.data, func() (any, int64) {
		src, err := x.load()
		if err != nil {
			return (*fullDWARF)(nil), 0
		}
		d, err := src.fullData(u.units)
		if err != nil {
			return (*fullDWARF)(nil), 0
		}
		f := &fullDWARF{data: d, src: &src}
		return f, f.cost(len(u.units))
	}).(*fullDWARF)
}

// sources returns the DWARF sections, loading (decompressing) them again
// after eviction; nil when they cannot be read.
func (x *Index) sources(u *dwarfUnits) *dwarfSources {
	if u.needsFull {
		if f := x.full(u); f != nil {
			return f.src
		}
		return nil
	}
	return x.cache.Get(KindSections, 0, x.data, func() (any, int64) {
		src, err := x.load()
		if err != nil {
			return (*dwarfSources)(nil), 0
		}
		return &src, src.cost(len(u.units))
	}).(*dwarfSources)
}

// unit returns the parsed table of unit i.
func (x *Index) unit(u *dwarfUnits, i int32) *dwarfTable {
	src := x.sources(u)
	if src == nil {
		return nil
	}
	var full *dwarf.Data
	if !u.alone[i] {
		if f := x.full(u); f != nil {
			full = f.data
		} else {
			return nil
		}
	}
	v := x.cache.Get(KindUnit, i, x.data, func() (any, int64) {
		d, release := full, func() {}
		if d == nil {
			var ok bool
			if d, release, ok = src.unitData(u.units[i]); !ok {
				return (*dwarfTable)(nil), 0
			}
		}
		defer release()
		t, err := newUnitReader(d, src).table(u.units[i])
		x.dropPages()
		if err != nil {
			return (*dwarfTable)(nil), 0
		}
		return t, t.size
	})
	return v.(*dwarfTable)
}

// Lookup returns the frames at pc from the first unit covering it that
// names it.
func (x *Index) Lookup(pc uint64) (frames []frame.Line, ok bool) {
	defer func() {
		// debug/dwarf reports most corruption as errors, but a hostile
		// file must never take the profiler down.
		if r := recover(); r != nil {
			_ = elfbin.Recovered(r, "looking up DWARF")
			frames, ok = nil, false
		}
	}()
	if p := x.prefix.Load(); p != nil {
		if frames, ok, decided := x.prefixLookup(p, pc); decided {
			return frames, ok
		}
	}
	u, err := x.units()
	if err != nil {
		return nil, false
	}
	if x.prefix.Load() != nil && x.prefix.Swap(nil) != nil {
		x.cache.DropPrefix()
	}
	var buf [4]int32
	for _, i := range u.covering(pc, buf[:0]) {
		if t := x.unit(u, i); t != nil {
			if frames, ok := t.lookup(pc); ok {
				return frames, true
			}
		}
	}
	return nil, false
}
