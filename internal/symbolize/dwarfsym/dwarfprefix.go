package dwarfsym

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/symbolize/sections"
)

// dwarfPrefix names addresses from compressed DWARF decompressed only as
// far as the units asked for: .debug_aranges says which unit covers an
// address, and .debug_info, .debug_abbrev and .debug_line are decompressed
// up to that unit's end, its abbreviations' and its line program's
// (prefixSection). A collector that just started names libc's start-up
// frames from the front of libc6-dbg's DWARF, and the rest is decompressed
// only if a lookup needs it.
//
// An answer is given only when it is the one the whole index
// (dwarfUnits) gives: the units before the one that names the address
// are all listed in .debug_aranges with the address size of their
// header, and each covering it was parsed and did not name it. Otherwise
// the lookup goes to the whole index, which decompresses the rest.
type dwarfPrefix struct {
	src                dwarfSources // info, abbrev and line are whole-size mappings, read only as far as ensured
	info, abbrev, line Prefix

	mu sync.Mutex
	// scanned are the units of .debug_info's front read so far, in
	// order, as unitDIEOffsets reads them; the first listed of them are
	// known to be listed in .debug_aranges, and unlisted says one is not.
	scanned  []unitStart
	listed   int
	unlisted bool
}

// ReadByPrefix is whether compressed DWARF is read by prefix; a benchmark
// compares with reading it whole.
var ReadByPrefix = func() *atomic.Bool { var b atomic.Bool; b.Store(true); return &b }()

// prefixIndex is the address index of the listed units, an entry of the
// table cache, read again from .debug_aranges when evicted.
type prefixIndex struct {
	// sets are the header offsets of the units .debug_aranges has sets
	// for, sorted, with each one's address size; ranges index them.
	sets     []uint64
	addrSize []uint8
	units    *dwarfUnits // only ranges and reach set
	cost     int64
}

// newDWARFPrefix returns the prefix reader of img's DWARF, or nil when it
// is to be read whole: not compressed with .debug_aranges, or no spill. A
// section kept whole on disk by an earlier run is mapped whole, and its
// units still indexed only as lookups need them.
func newDWARFPrefix(img sections.Image, spill Spill) (_ *dwarfPrefix) {
	defer func() {
		// A file truncated under its mapping faults: the whole index
		// reads it and says why. Any other panic is counted.
		if r := recover(); r != nil {
			_ = elfbin.Recovered(r, "reading the DWARF prefix")
		}
	}()
	f := img.F
	if f.Type == elf.ET_REL || img.Data == nil || spill == nil || !ReadByPrefix.Load() {
		return nil
	}
	var sects [len(dwarfSectionNames)]*elf.Section
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".zdebug_") {
			return nil // GNU's older compression, whose sizes are not known up front
		}
		if suffix, ok := strings.CutPrefix(s.Name, ".debug_"); ok {
			if i := slices.Index(dwarfSectionNames[:], suffix); i >= 0 && sects[i] == nil {
				sects[i] = s
			}
		}
	}
	const abbrevSect, infoSect, lineSect = 0, 1, 3
	if sects[infoSect] == nil || sects[infoSect].Flags&elf.SHF_COMPRESSED == 0 || sects[arangesSection] == nil {
		return nil
	}
	raw := func(s *elf.Section) []byte {
		if s.Offset <= uint64(len(img.Data)) && s.FileSize <= uint64(len(img.Data))-s.Offset {
			return img.Data[s.Offset : s.Offset+s.FileSize]
		}
		return nil
	}
	p := &dwarfPrefix{}
	for i, s := range sects {
		if s == nil {
			continue
		}
		if i == infoSect || i == abbrevSect || i == lineSect {
			// One kept whole from an earlier run is mapped whole below,
			// and units are still indexed as lookups need them.
			ps, whole, ok := spill.Prefix(f, s, raw(s))
			if ok && whole == nil {
				p.src.sects[i] = ps.Data()
				switch i {
				case infoSect:
					p.info = ps
				case abbrevSect:
					p.abbrev = ps
				default:
					p.line = ps
				}
				continue
			}
			if ok {
				p.src.sects[i] = whole
				continue
			}
		}
		b, heap, err := img.Section(s)
		if err != nil || heap {
			// The heap would hold what no cache counts: read whole.
			return nil
		}
		p.src.sects[i] = b
	}
	p.src.info, p.src.abbrev, p.src.ranges = p.src.sects[infoSect], p.src.sects[abbrevSect], p.src.sects[4]
	p.src.aranges, p.src.order = p.src.sects[arangesSection], f.ByteOrder
	p.src.sects[arangesSection] = nil
	// A first unit that cannot be read says the DWARF is corrupt, as the
	// whole index would.
	if _, _, ok := p.unitAt(0); !ok {
		return nil
	}
	return p
}

// index builds the address index of the units .debug_aranges lists.
func (p *dwarfPrefix) index() *prefixIndex {
	x := &prefixIndex{units: &dwarfUnits{}}
	byOff := map[uint64]int32{}
	var unit int32
	ok := true
	arangeSets(p.src.aranges, p.src.order, func(infoOff uint64, addrSize int) ([][2]uint64, bool) {
		i, seen := byOff[infoOff]
		if !seen {
			i = int32(len(x.sets))
			byOff[infoOff] = i
			x.sets = append(x.sets, infoOff)
			x.addrSize = append(x.addrSize, uint8(addrSize))
		} else if x.addrSize[i] != uint8(addrSize) {
			ok = false // the whole index takes one set and not the other
		}
		unit = i
		return nil, true
	}, func(rs [][2]uint64) {
		for _, rg := range rs {
			if rg[1] > rg[0] {
				x.units.ranges = append(x.units.ranges, unitRange{lo: rg[0], hi: rg[1], unit: unit})
			}
		}
	})
	if !ok || len(x.sets) > maxUnits {
		x.sets = nil
		x.units.ranges = nil
	}
	// Units by offset, so that covering returns them in that order.
	order := make([]int32, len(x.sets))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(x.sets[a], x.sets[b]) })
	rank := make([]int32, len(order))
	sets, sizes := make([]uint64, len(order)), make([]uint8, len(order))
	for r, i := range order {
		rank[i] = int32(r)
		sets[r], sizes[r] = x.sets[i], x.addrSize[i]
	}
	x.sets, x.addrSize = sets, sizes
	for i := range x.units.ranges {
		x.units.ranges[i].unit = rank[x.units.ranges[i].unit]
	}
	u := x.units
	u.sortRanges()
	x.cost = int64(cap(x.sets))*9 + int64(cap(u.ranges))*int64(unsafe.Sizeof(unitRange{})) + int64(cap(u.reach))*8 +
		int64(len(x.sets)+1)*int64(unsafe.Sizeof(unitStart{})) // the units scanned, at most one past the listed
	return x
}

// unitAt returns the unit whose header is at hdr in .debug_info and its
// index among all units, decompressing up to its end; ok is false when no
// unit starts there or one before it is not listed in .debug_aranges
// (checked by the caller through listed).
func (p *dwarfPrefix) unitAt(hdr uint64) (_ unitStart, i int, ok bool) {
	// .debug_info is read whole when kept so from an earlier run.
	size := uint64(len(p.src.info))
	ensure := func(n uint64) bool { return p.info == nil || p.info.Ensure(int64(n)) == nil }
	have := func() []byte {
		if p.info == nil {
			return p.src.info
		}
		return p.src.info[:p.info.Length()]
	}
	if hdr >= size {
		return unitStart{}, 0, false
	}
	// The longest header: 64-bit length, version, unit type, address
	// size, abbreviation offset, unit ID or signature and type offset.
	if !ensure(min(size, hdr+4+8+2+2+8+8+8)) {
		return unitStart{}, 0, false
	}
	b := have()
	if uint64(len(b))-hdr < 4 {
		return unitStart{}, 0, false
	}
	n, word := uint64(p.src.order.Uint32(b[hdr:])), uint64(4)
	if n == 0xffffffff {
		if uint64(len(b))-hdr < 12 {
			return unitStart{}, 0, false
		}
		n, word = p.src.order.Uint64(b[hdr+4:]), 12
	}
	if n > size-hdr-word {
		return unitStart{}, 0, false
	}
	end := hdr + word + n
	if !ensure(end) {
		return unitStart{}, 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scanTo(end)
	i, found := slices.BinarySearchFunc(p.scanned, hdr, func(u unitStart, off uint64) int { return cmp.Compare(uint64(u.hdr), off) })
	if !found || uint64(p.scanned[i].end) != end {
		return unitStart{}, 0, false
	}
	return p.scanned[i], i, true
}

// scanTo reads the unit headers up to end, on from the last unit read, as
// one read from the start would; p.mu is held.
func (p *dwarfPrefix) scanTo(end uint64) {
	base := p.scannedEnd()
	if base >= end {
		return
	}
	for _, u := range unitDIEOffsets(p.src.info[base:end:end], p.src.order) {
		u.off += dwarf.Offset(base)
		u.hdr += int(base)
		u.end += int(base)
		p.scanned = append(p.scanned, u)
	}
	if len(p.scanned) > maxUnits {
		// The whole index refuses as many.
		p.scanned, p.unlisted = p.scanned[:maxUnits:maxUnits], true
	}
}

// scannedEnd is where the units read so far end.
func (p *dwarfPrefix) scannedEnd() uint64 {
	if len(p.scanned) == 0 {
		return 0
	}
	return uint64(p.scanned[len(p.scanned)-1].end)
}

// listedBefore reports whether every unit up to i is listed in x with
// its header's address size. x is built the same from the same bytes
// every time, so what was checked stays checked.
func (p *dwarfPrefix) listedBefore(x *prefixIndex, i int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ; !p.unlisted && p.listed <= i && p.listed < len(p.scanned); p.listed++ {
		u := p.scanned[p.listed]
		j, found := slices.BinarySearch(x.sets, uint64(u.hdr))
		if !found || x.addrSize[j] != u.addrSize {
			p.unlisted = true
		}
	}
	return !p.unlisted && p.listed > i
}

// ensureAbbrev decompresses .debug_abbrev up to the end of the table at
// off, or whole when it does not end.
func (p *dwarfPrefix) ensureAbbrev(off uint64) bool {
	a := p.abbrev
	if a == nil {
		return true
	}
	for n := int64(min(off, uint64(a.Size()))) + 4096; ; n *= 2 {
		if a.Ensure(n) != nil {
			return false
		}
		have := a.Length()
		if have >= a.Size() || !refersToOtherUnits(p.src.abbrev[:have], off) {
			return true
		}
	}
}

// ensureLines decompresses .debug_line up to the end of the line program
// of the unit at start, read through d.
func (p *dwarfPrefix) ensureLines(d *dwarf.Data, start unitStart) bool {
	l := p.line
	if l == nil {
		return true
	}
	r := d.Reader()
	r.Seek(start.off)
	cu, err := r.Next()
	if err != nil || cu == nil {
		return true // the unit's parse fails the same way
	}
	off, ok := cu.Val(dwarf.AttrStmtList).(int64)
	if !ok || off < 0 || off >= l.Size() {
		return true
	}
	if l.Ensure(off+12) != nil {
		return false
	}
	b := p.src.sects[3][:l.Length()]
	if int64(len(b))-off < 4 {
		return l.Ensure(l.Size()) == nil
	}
	n, word := int64(p.src.order.Uint32(b[off:])), int64(4)
	if n == 0xffffffff {
		if int64(len(b))-off < 12 {
			return l.Ensure(l.Size()) == nil
		}
		u := p.src.order.Uint64(b[off+4:])
		if u > uint64(l.Size()) {
			return l.Ensure(l.Size()) == nil
		}
		n, word = int64(u), 12
	}
	return l.Ensure(min(l.Size(), off+word+n)) == nil
}

// prefixLookup returns the frames at pc when the prefix read so far, and
// the units it decompresses, give the whole index's answer; decided says
// they do, named or not.
func (x *Index) prefixLookup(p *dwarfPrefix, pc uint64) (frames []frame.Line, ok, decided bool) {
	defer func() {
		// A hostile file: the whole index decides.
		if r := recover(); r != nil {
			_ = elfbin.Recovered(r, "looking up the DWARF prefix")
			frames, ok, decided = nil, false, false
		}
	}()
	xi := x.cache.Get(KindPrefixIndex, 0, x.data, func() (any, int64) {
		pi := p.index()
		return pi, pi.cost
	}).(*prefixIndex)
	var buf [4]int32
	for _, c := range xi.units.covering(pc, buf[:0]) {
		start, i, found := p.unitAt(xi.sets[c])
		if !found || start.addrSize != xi.addrSize[c] || !p.listedBefore(xi, i) {
			return nil, false, false
		}
		t := x.cache.Get(KindPrefixUnit, int32(i), x.data, func() (any, int64) {
			t := p.table(start)
			x.dropPages()
			if t == nil {
				return t, 0
			}
			return t, t.size
		}).(*dwarfTable)
		if t == nil {
			return nil, false, false
		}
		if frames, ok := t.lookup(pc); ok {
			return frames, true, true
		}
	}
	// No listed unit names pc (assembly without DWARF: _start,
	// __restore_rt): the whole index would only add the units not
	// listed. Reading every unit header, not the whole DWARF, tells
	// whether there are any.
	return nil, false, p.allListed(xi)
}

// allListed reports whether every unit of .debug_info is listed in x,
// decompressing .debug_info whole to read their headers.
func (p *dwarfPrefix) allListed(x *prefixIndex) bool {
	size := uint64(len(p.src.info))
	if p.info != nil && p.info.Ensure(int64(size)) != nil {
		return false
	}
	p.mu.Lock()
	p.scanTo(size)
	n := len(p.scanned)
	p.mu.Unlock()
	return n > 0 && p.listedBefore(x, n-1)
}

// table parses the unit at start read alone, as Index.unit does; nil
// when it cannot be.
func (p *dwarfPrefix) table(start unitStart) *dwarfTable {
	if !p.ensureAbbrev(start.abbrevOff) || !p.src.readsAlone(start) {
		return nil
	}
	src := p.src
	d, release, ok := src.unitData(start)
	if !ok {
		return nil
	}
	defer release()
	if !p.ensureLines(d, start) {
		return nil
	}
	t, err := newUnitReader(d, &src).table(start)
	if err != nil {
		return nil
	}
	return t
}
