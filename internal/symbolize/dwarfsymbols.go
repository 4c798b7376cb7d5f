package symbolize

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// dwarfTable answers lookups from DWARF: the function, file:line and the
// chain of inlined calls at an address. It is built once per compile unit
// into flat sorted slices so a lookup is a few binary searches, and kept
// compact: the line rows packed (lineTable), the scopes' names in one
// string, their strings and child lists referred to by index.
type dwarfTable struct {
	lines    lineTable
	files    []string     // lineRow.file and dwarfScope.callFile index this
	funcs    []scopeRange // outermost subprogram ranges, sorted by lo
	scopes   []dwarfScope
	children []childRange // the scopes' children, each scope's run sorted by lo
	// childBase is the address the children's ranges start from.
	childBase uint64
	names     string // the scopes' names, each once and ended by a NUL

	size int64 // heap footprint, for size-bounded caches
}

// lineRow is one row of the merged line tables, as parsed and decoded.
type lineRow struct {
	addr uint64
	file uint32 // index into dwarfTable.files; endOfSequence for an end row
	line int32
}

// endOfSequence marks the row just past a sequence: no line there.
const endOfSequence = ^uint32(0)

func (r *lineRow) end() bool { return r.file == endOfSequence }

// scopeRange is one address range of a subprogram or inlined call: 16
// bytes, since a range of one function spans less than 4 GiB.
type scopeRange struct {
	lo    uint64
	size  uint32
	scope int32
}

func (r *scopeRange) hi() uint64 { return r.lo + uint64(r.size) }

// newScopeRange returns the range [lo, hi) of scope; false when it is
// empty or too large to be a function's.
func newScopeRange(lo, hi uint64, scope int32) (scopeRange, bool) {
	if hi <= lo || hi-lo > math.MaxUint32 {
		return scopeRange{}, false
	}
	return scopeRange{lo: lo, size: uint32(hi - lo), scope: scope}, true
}

// dwarfScope is a subprogram or an inlined subroutine.
type dwarfScope struct {
	// name is where its raw (mangled) name starts in dwarfTable.names,
	// noScopeName for none; it is demangled at lookup.
	name uint32
	// callFile (an index into dwarfTable.files, noCallFile for none) and
	// callLine say where this scope was inlined into its parent; none for
	// subprograms.
	callFile uint32
	callLine int32
	// children is where the ranges of the inlined calls directly inside
	// start in dwarfTable.children; they end where the next scope's
	// start.
	children uint32
}

// noCallFile is the callFile of a scope without one; noScopeName the name of a
// scope without one.
const (
	noCallFile  = ^uint32(0)
	noScopeName = ^uint32(0)
)

// childRange is one address range of an inlined call, from
// dwarfTable.childBase: 12 bytes, as calls inlined into one compile unit's
// functions lie within 4 GiB of each other.
type childRange struct {
	lo, size uint32
	scope    int32
}

// scopeInfo is a scope as a unit's reading finds it.
type scopeInfo struct {
	name, callFile string
	callLine       int32
}

const (
	attrMIPSLinkageName = dwarf.Attr(0x2007)
	tagPartialUnit      = dwarf.Tag(0x3c)
	tagSkeletonUnit     = dwarf.Tag(0x4a)
	// tagCallSite and tagGNUCallSite describe calls; their children are
	// the calls' parameters, never code.
	tagCallSite    = dwarf.Tag(0x48)
	tagGNUCallSite = dwarf.Tag(0x4109)
	// maxOriginDepth bounds DW_AT_specification / DW_AT_abstract_origin
	// chains, which a corrupt file could make cyclic.
	maxOriginDepth = 8
	// maxScopeDepth bounds DIE nesting that is tracked.
	maxScopeDepth = 1024
)

// dwarfNames resolves DIE names through specification and abstract origin
// references, caching each referenced DIE.
type dwarfNames struct {
	d     *dwarf.Data
	r     *dwarf.Reader
	cache map[dwarf.Offset]dieNames
}

type dieNames struct{ linkage, name string }

func (n *dwarfNames) of(e *dwarf.Entry) string {
	dn := n.resolve(e, 0)
	if dn.linkage != "" {
		return dn.linkage
	}
	return dn.name
}

// resolve returns the linkage name and the plain name of e, each taken from
// the first DIE along its specification/origin chain that has one, which is
// the order llvm-symbolizer uses.
func (n *dwarfNames) resolve(e *dwarf.Entry, depth int) dieNames {
	var dn dieNames
	if s, ok := e.Val(dwarf.AttrLinkageName).(string); ok {
		dn.linkage = s
	} else if s, ok := e.Val(attrMIPSLinkageName).(string); ok {
		dn.linkage = s
	}
	if s, ok := e.Val(dwarf.AttrName).(string); ok {
		dn.name = s
	}
	if (dn.linkage != "" && dn.name != "") || depth >= maxOriginDepth {
		return dn
	}
	for _, a := range [...]dwarf.Attr{dwarf.AttrSpecification, dwarf.AttrAbstractOrigin} {
		off, ok := e.Val(a).(dwarf.Offset)
		if !ok {
			continue
		}
		ref, ok := n.cache[off]
		if !ok {
			n.r.Seek(off)
			re, err := n.r.Next()
			if err == nil && re != nil {
				ref = n.resolve(re, depth+1)
			}
			n.cache[off] = ref
		}
		if dn.linkage == "" {
			dn.linkage = ref.linkage
		}
		if dn.name == "" {
			dn.name = ref.name
		}
		break
	}
	return dn
}

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
	return loadDWARFImage(elfImage{f: f})
}

// loadDWARFImage takes the sections lookups need from the mapped file, and
// decompresses (zlib, zstd, .zdebug) those stored compressed, in parallel.
func loadDWARFImage(img elfImage) (dwarfSources, error) {
	f := img.f
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
			defer guardFaults()()
			defer func() {
				if r := recover(); r != nil {
					errs[i] = recovered(r, "reading "+s.Name)
				}
			}()
			b, heap, err := img.section(s)
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

// unitTables is what one compile unit contributes to a dwarfTable, with
// file and scope indexes local to the unit.
type unitTables struct {
	lines   []lineRow
	seqs    [][2]int32 // [start, end) of each sequence in lines
	files   []string
	funcs   []scopeRange
	scopes  []scopeInfo
	inlined []childOf
	err     error
}

type childOf struct {
	parent int32
	sr     scopeRange
}

// maxUnits bounds the compile units read from one (possibly hostile) file.
const maxUnits = 1 << 20

// unitReader reads compile units one at a time; one per goroutine.
type unitReader struct {
	d          *dwarf.Data
	r          *dwarf.Reader
	names      *dwarfNames
	rangesData []byte
	order      binary.ByteOrder
	// Of the unit being read: whether DW_AT_ranges is read here rather
	// than by debug/dwarf, which re-decodes the unit's DIE for every
	// range list, and the base address the lists start from.
	ownRanges bool
	base      uint64
	addrSize  int
	// readSkipped has skipChildren decode what it skips instead of
	// following DW_AT_sibling (a test compares the two); siblingSkips
	// counts the subtrees a sibling skipped.
	readSkipped  bool
	siblingSkips int
}

// ranges returns the address ranges of e.
func (w *unitReader) ranges(e *dwarf.Entry) [][2]uint64 {
	if w.ownRanges {
		if f := e.AttrField(dwarf.AttrRanges); f != nil && f.Class == dwarf.ClassRangeListPtr && e.AttrField(dwarf.AttrLowpc) == nil {
			off, ok := f.Val.(int64)
			if !ok || off < 0 || off >= int64(len(w.rangesData)) {
				return nil
			}
			return rangeList(w.rangesData[off:], w.base, w.addrSize, w.order)
		}
	}
	r, _ := w.d.Ranges(e)
	return r
}

// rangeList decodes a DWARF 2-4 range list: address pairs relative to base
// until (0, 0), a pair starting with the largest address setting base.
func rangeList(b []byte, base uint64, addrSize int, order binary.ByteOrder) [][2]uint64 {
	var ret [][2]uint64
	word := func(b []byte) uint64 {
		if addrSize == 8 {
			return order.Uint64(b)
		}
		return uint64(order.Uint32(b))
	}
	maxAddr := ^uint64(0) >> uint((8-addrSize)*8)
	for len(b) >= 2*addrSize {
		lo, hi := word(b), word(b[addrSize:])
		b = b[2*addrSize:]
		switch {
		case lo == 0 && hi == 0:
			return ret
		case lo == maxAddr:
			base = hi
		default:
			ret = append(ret, [2]uint64{base + lo, base + hi})
		}
	}
	return ret
}

// read decodes the unit whose first DIE is at off. debug/dwarf reports most
// corruption as errors, but a hostile file must never take the profiler
// down.
func (w *unitReader) read(start unitStart) (u unitTables) {
	defer func() {
		if r := recover(); r != nil {
			u = unitTables{err: recovered(r, fmt.Sprintf("decoding DWARF unit at 0x%x", start.off))}
		}
	}()
	w.r.Seek(start.off)
	r := &progressReader{r: w.r}
	cu, err := r.Next()
	if err != nil {
		return unitTables{err: fmt.Errorf("reading compile unit: %w", err)}
	}
	if cu == nil || (cu.Tag != dwarf.TagCompileUnit && cu.Tag != tagPartialUnit && cu.Tag != tagSkeletonUnit) {
		return u
	}
	w.addrSize = w.r.AddressSize()
	w.ownRanges = start.vers < 5 && w.rangesData != nil && (w.addrSize == 4 || w.addrSize == 8)
	w.base = 0
	if v, ok := cu.Val(dwarf.AttrEntrypc).(uint64); ok {
		w.base = v
	} else if v, ok := cu.Val(dwarf.AttrLowpc).(uint64); ok {
		w.base = v
	}
	lineFiles := u.addLines(w.d, cu)
	if !cu.Children {
		return u
	}
	fileName := func(e *dwarf.Entry) string {
		idx, ok := e.Val(dwarf.AttrCallFile).(int64)
		if !ok || idx < 0 || idx >= int64(len(lineFiles)) || lineFiles[idx] == nil {
			return ""
		}
		return lineFiles[idx].Name
	}
	// stack holds, per open DIE, the innermost enclosing scope (-1 for
	// none).
	stack := []int32{-1}
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil {
			return unitTables{err: fmt.Errorf("reading DIE: %w", err)}
		}
		if e == nil {
			return unitTables{err: errors.New("reading DIE: unit ends inside a DIE tree")}
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		top := stack[len(stack)-1]
		push := top
		switch e.Tag {
		case dwarf.TagSubprogram:
			ranges := w.ranges(e)
			if len(ranges) > 0 {
				idx := int32(len(u.scopes))
				u.scopes = append(u.scopes, scopeInfo{name: w.names.of(e)})
				for _, rg := range ranges {
					if sr, ok := newScopeRange(rg[0], rg[1], idx); ok && rg[0] != 0 {
						u.funcs = append(u.funcs, sr)
					}
				}
				push = idx
			} else if e.Children {
				// A declaration or an abstract instance: no code, and
				// its children (parameters, variables, blocks) none.
				if err := w.skipChildren(r, e, start.end); err != nil {
					return unitTables{err: err}
				}
				continue
			}
		case dwarf.TagInlinedSubroutine:
			if top < 0 {
				break
			}
			ranges := w.ranges(e)
			if len(ranges) == 0 {
				break
			}
			line, _ := e.Val(dwarf.AttrCallLine).(int64)
			idx := int32(len(u.scopes))
			u.scopes = append(u.scopes, scopeInfo{name: w.names.of(e), callFile: fileName(e), callLine: int32(line)})
			for _, rg := range ranges {
				if sr, ok := newScopeRange(rg[0], rg[1], idx); ok {
					u.inlined = append(u.inlined, childOf{parent: top, sr: sr})
				}
			}
			push = idx
		case dwarf.TagStructType, dwarf.TagClassType, dwarf.TagUnionType, dwarf.TagEnumerationType,
			dwarf.TagSubroutineType, dwarf.TagArrayType, tagCallSite, tagGNUCallSite:
			// Types hold no code; their member declarations are
			// reached through DW_AT_specification when needed.
			if e.Children {
				if err := w.skipChildren(r, e, start.end); err != nil {
					return unitTables{err: err}
				}
			}
			continue
		}
		if e.Children {
			if len(stack) >= maxScopeDepth {
				return unitTables{err: errors.New("reading DIE: nesting too deep")}
			}
			stack = append(stack, push)
		}
	}
	return u
}

// mergeUnits joins the units' tables in unit order, so that scope indexes
// and tie-breaks are those of one sequential pass.
func mergeUnits(res []unitTables) (*dwarfTable, error) {
	t := &dwarfTable{}
	var nLines, nFuncs, nScopes, nFiles, nInlined int
	for i := range res {
		if res[i].err != nil {
			return nil, res[i].err
		}
		nLines += len(res[i].lines)
		nFuncs += len(res[i].funcs)
		nScopes += len(res[i].scopes)
		nFiles += len(res[i].files)
		nInlined += len(res[i].inlined)
	}
	t.funcs = make([]scopeRange, 0, nFuncs)
	t.files = make([]string, 0, nFiles)
	type seqRef struct {
		unit int32
		span [2]int32
	}
	var seqs []seqRef
	scopes := make([]scopeInfo, 0, nScopes)
	inlined := make([]childOf, 0, nInlined)
	for i := range res {
		u := &res[i]
		base := int32(len(scopes))
		for _, f := range u.funcs {
			f.scope += base
			t.funcs = append(t.funcs, f)
		}
		for _, c := range u.inlined {
			c.parent += base
			c.sr.scope += base
			inlined = append(inlined, c)
		}
		scopes = append(scopes, u.scopes...)
		fileBase := uint32(len(t.files))
		t.files = append(t.files, u.files...)
		for j := range u.lines {
			if !u.lines[j].end() {
				u.lines[j].file += fileBase
			}
		}
		for _, sp := range u.seqs {
			seqs = append(seqs, seqRef{int32(i), sp})
		}
	}
	t.setScopes(scopes, inlined)
	slices.SortStableFunc(t.funcs, func(a, b scopeRange) int { return cmp.Compare(a.lo, b.lo) })

	// Each sequence is sorted and sequences rarely overlap: order them by
	// start address and concatenate. Overlapping ones fall back to a
	// stable sort of every row in reading order.
	first := func(s seqRef) uint64 { return res[s.unit].lines[s.span[0]].addr }
	byStart := slices.Clone(seqs)
	slices.SortStableFunc(byStart, func(a, b seqRef) int { return cmp.Compare(first(a), first(b)) })
	lines := make([]lineRow, 0, nLines)
	for _, s := range byStart {
		lines = append(lines, res[s.unit].lines[s.span[0]:s.span[1]]...)
	}
	if !linesOrdered(lines) {
		lines = lines[:0]
		for _, s := range seqs {
			lines = append(lines, res[s.unit].lines[s.span[0]:s.span[1]]...)
		}
		slices.SortStableFunc(lines, compareRows)
	}
	t.lines = encodeLines(lines)
	t.size = t.heapSize()
	if len(t.funcs) == 0 && len(lines) == 0 {
		return nil, errors.New("decoding DWARF: no functions and no lines")
	}
	return t, nil
}

// setScopes stores scopes, with the inlined calls each contains: their
// names in one string, each once; their call files as indexes into
// t.files (added to it when no line names them); their children in one
// slice, grouped by parent.
func (t *dwarfTable) setScopes(scopes []scopeInfo, inlined []childOf) {
	t.scopes = make([]dwarfScope, len(scopes))
	var names strings.Builder
	nameAt := map[string]uint32{}
	fileAt := make(map[string]uint32, len(t.files))
	for i, f := range t.files {
		if _, ok := fileAt[f]; !ok {
			fileAt[f] = uint32(i)
		}
	}
	for i, s := range scopes {
		d := &t.scopes[i]
		d.name, d.callFile, d.callLine = noScopeName, noCallFile, s.callLine
		// DWARF strings end with a NUL, so none holds one.
		if s.name != "" && !strings.Contains(s.name, "\x00") {
			at, ok := nameAt[s.name]
			if !ok && names.Len()+len(s.name)+1 < math.MaxUint32 {
				at, ok = uint32(names.Len()), true
				names.WriteString(s.name)
				names.WriteByte(0)
				nameAt[s.name] = at
			}
			if ok {
				d.name = at
			}
		}
		if s.callFile != "" {
			f, ok := fileAt[s.callFile]
			if !ok {
				f = uint32(len(t.files))
				t.files = append(t.files, s.callFile)
				fileAt[s.callFile] = f
			}
			d.callFile = f
		}
	}
	t.names = strings.Clone(names.String())
	// Children grouped by parent in reading order, then each run sorted.
	// Those beyond 4 GiB of the lowest cannot be held (and no unit has
	// them).
	if len(inlined) > 0 {
		t.childBase = inlined[0].sr.lo
		for _, c := range inlined {
			t.childBase = min(t.childBase, c.sr.lo)
		}
		inlined = slices.DeleteFunc(inlined, func(c childOf) bool { return c.sr.hi()-t.childBase > math.MaxUint32 })
	}
	slices.SortStableFunc(inlined, func(a, b childOf) int { return cmp.Compare(a.parent, b.parent) })
	t.children = make([]childRange, len(inlined))
	next := 0 // the first child of a parent not yet reached
	for i := range t.scopes {
		t.scopes[i].children = uint32(next)
		for next < len(inlined) && int(inlined[next].parent) == i {
			c := inlined[next].sr
			t.children[next] = childRange{lo: uint32(c.lo - t.childBase), size: c.size, scope: c.scope}
			next++
		}
	}
	for i := range t.scopes {
		slices.SortFunc(t.childrenOf(int32(i)), func(a, b childRange) int { return cmp.Compare(a.lo, b.lo) })
	}
}

// childrenOf returns the ranges of the calls inlined directly into scope
// i.
func (t *dwarfTable) childrenOf(i int32) []childRange {
	end := uint32(len(t.children))
	if int(i)+1 < len(t.scopes) {
		end = t.scopes[i+1].children
	}
	return t.children[t.scopes[i].children:end]
}

func (t *dwarfTable) nameOf(s *dwarfScope) string {
	if s.name == noScopeName {
		return ""
	}
	n := t.names[s.name:]
	return n[:strings.IndexByte(n, 0)]
}

func (t *dwarfTable) callFileOf(s *dwarfScope) string {
	if s.callFile == noCallFile {
		return ""
	}
	return t.files[s.callFile]
}

// heapSize is what t holds on the heap: its slices and strings. The file
// names are counted once each, though the line reader's copies they refer
// to may hold more.
func (t *dwarfTable) heapSize() int64 {
	const stringHeader = 16
	n := int64(unsafe.Sizeof(*t)) + t.lines.heapSize() + int64(cap(t.funcs))*int64(unsafe.Sizeof(scopeRange{})) + int64(cap(t.children))*int64(unsafe.Sizeof(childRange{})) +
		int64(cap(t.scopes))*int64(unsafe.Sizeof(dwarfScope{})) + int64(cap(t.files))*stringHeader + int64(len(t.names))
	for _, f := range t.files {
		n += int64(len(f))
	}
	return n
}

// compareRows orders rows by address; a sequence ending where the next
// starts yields to the start.
func compareRows(x, y lineRow) int {
	if c := cmp.Compare(x.addr, y.addr); c != 0 {
		return c
	}
	switch {
	case x.end() && !y.end():
		return -1
	case !x.end() && y.end():
		return 1
	}
	return 0
}

func linesOrdered(rows []lineRow) bool {
	for i := 1; i < len(rows); i++ {
		if compareRows(rows[i-1], rows[i]) > 0 {
			return false
		}
		// Equal rows from different sequences: only the stable sort keeps
		// their reading order.
		if rows[i-1].addr == rows[i].addr && rows[i-1].end() == rows[i].end() {
			return false
		}
	}
	return true
}

// addLines appends the rows of cu's line table, one per address (the last
// row at an address wins, as in llvm-symbolizer), and returns the unit's
// file table for DW_AT_call_file.
func (u *unitTables) addLines(d *dwarf.Data, cu *dwarf.Entry) []*dwarf.LineFile {
	lr, err := d.LineReader(cu)
	if err != nil || lr == nil {
		return nil
	}
	var (
		le       dwarf.LineEntry
		seqStart = len(u.lines)
		interned = map[*dwarf.LineFile]uint32{}
	)
	flush := func(endAddr uint64) {
		// Rows at or past the end address cover nothing.
		for len(u.lines) > seqStart && u.lines[len(u.lines)-1].addr >= endAddr {
			u.lines = u.lines[:len(u.lines)-1]
		}
		// Sequences at address 0 are code the linker dropped.
		if len(u.lines) > seqStart && u.lines[seqStart].addr != 0 {
			u.lines = append(u.lines, lineRow{addr: endAddr, file: endOfSequence})
			u.seqs = append(u.seqs, [2]int32{int32(seqStart), int32(len(u.lines))})
		} else {
			u.lines = u.lines[:seqStart]
		}
		seqStart = len(u.lines)
	}
	for {
		if err := lr.Next(&le); err != nil {
			break // io.EOF, or a corrupt table: keep what was read
		}
		if le.EndSequence {
			flush(le.Address)
			continue
		}
		var file uint32
		if le.File != nil {
			var ok bool
			if file, ok = interned[le.File]; !ok {
				file = uint32(len(u.files))
				u.files = append(u.files, le.File.Name)
				interned[le.File] = file
			}
		} else {
			file = u.noFile()
		}
		row := lineRow{addr: le.Address, file: file, line: int32(le.Line)}
		if n := len(u.lines); n > seqStart && u.lines[n-1].addr == row.addr {
			u.lines[n-1] = row
			continue
		}
		if n := len(u.lines); n > seqStart && row.addr < u.lines[n-1].addr {
			// Addresses go backwards only in a corrupt table.
			break
		}
		if len(u.lines) >= math.MaxInt32-1 {
			break
		}
		u.lines = append(u.lines, row)
	}
	// A sequence left open by a corrupt table is dropped.
	u.lines = u.lines[:seqStart]
	return lr.Files()
}

// noFile returns the index of the empty file name, for rows without one.
func (u *unitTables) noFile() uint32 {
	for i, f := range u.files {
		if f == "" {
			return uint32(i)
		}
	}
	u.files = append(u.files, "")
	return uint32(len(u.files) - 1)
}

// lineAt returns the file and line of pc.
func (t *dwarfTable) lineAt(pc uint64) (string, int32, bool) {
	r, ok := t.lines.at(pc)
	if !ok || r.end() {
		return "", 0, false
	}
	return t.files[r.file], r.line, true
}

// findRange returns the range in rs (sorted by lo) covering pc.
func findRange(rs []scopeRange, pc uint64) (int32, bool) {
	lo, hi := 0, len(rs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rs[m].lo > pc {
			hi = m
		} else {
			lo = m + 1
		}
	}
	i := lo - 1
	// Ranges rarely overlap; look back a few so an enclosing one is found.
	for j := i; j >= 0 && j > i-maxNestedLookback; j-- {
		if pc < rs[j].hi() {
			return rs[j].scope, true
		}
	}
	return -1, false
}

// findChild returns the range in rs (sorted by lo) covering the address
// rel bytes past dwarfTable.childBase; none when in is false (the address
// is below the base).
func findChild(rs []childRange, rel uint64, in bool) (int32, bool) {
	if !in || rel > math.MaxUint32 {
		return -1, false
	}
	pc := uint32(rel)
	lo, hi := 0, len(rs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rs[m].lo > pc {
			hi = m
		} else {
			lo = m + 1
		}
	}
	i := lo - 1
	// As findRange: a few back so an enclosing range is found.
	for j := i; j >= 0 && j > i-maxNestedLookback; j-- {
		if uint64(pc) < uint64(rs[j].lo)+uint64(rs[j].size) {
			return rs[j].scope, true
		}
	}
	return -1, false
}

// lookup returns the frames at pc, innermost inlined call first and the
// physical function last. A frame's Function is "" when DWARF has a line but
// no function for pc.
func (t *dwarfTable) lookup(pc uint64) ([]Frame, bool) {
	file, line, hasLine := t.lineAt(pc)
	fn, ok := findRange(t.funcs, pc)
	if !ok {
		if !hasLine {
			return nil, false
		}
		return []Frame{{File: file, Line: int64(line)}}, true
	}
	chain := [16]int32{}
	scopes := append(chain[:0], fn)
	for cur := fn; len(scopes) < maxScopeDepth; {
		next, ok := findChild(t.childrenOf(cur), pc-t.childBase, pc >= t.childBase)
		if !ok {
			break
		}
		scopes = append(scopes, next)
		cur = next
	}
	frames := make([]Frame, len(scopes))
	for i := range scopes {
		s := &t.scopes[scopes[len(scopes)-1-i]]
		// A copy: a substring would keep the unit's whole name string
		// alive in the caches of named frames after the unit's eviction.
		frames[i].Function, frames[i].SystemName = sourceAndSystemName(strings.Clone(t.nameOf(s)))
		if i == 0 {
			frames[i].File, frames[i].Line = file, int64(line)
		} else {
			inner := &t.scopes[scopes[len(scopes)-i]]
			frames[i].File, frames[i].Line = t.callFileOf(inner), int64(inner.callLine)
		}
	}
	return frames, true
}

// skipChildren skips the children of e, the entry just read, in a unit
// that ends at end. A DW_AT_sibling (GCC gives one to every DIE with
// children) skips them undecoded: most of a C or C++ unit is type
// members, and decoding them was most of a unit's parse and garbage. A
// sibling not ahead of e within the unit, which only a corrupt file has,
// is not followed: the children are read through instead, with no
// recursion.
func (w *unitReader) skipChildren(r *progressReader, e *dwarf.Entry, end int) error {
	if sib, ok := e.Val(dwarf.AttrSibling).(dwarf.Offset); ok && sib > e.Offset && int64(sib) < int64(end) && !w.readSkipped {
		r.r.Seek(sib)
		w.siblingSkips++
		return nil
	}
	for depth := 1; depth > 0; {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("skipping DIEs: %w", err)
		}
		if e == nil {
			return errors.New("skipping DIEs: unit ends inside a DIE tree")
		}
		switch {
		case e.Tag == 0:
			depth--
		case e.Children:
			depth++
		}
	}
	return nil
}

// progressReader refuses to read an entry at or before the previous one,
// or an endless run of null entries: debug/dwarf can be led in circles by
// a corrupt file.
type progressReader struct {
	r     *dwarf.Reader
	last  dwarf.Offset
	read  bool
	nulls int
}

// maxNullRun bounds consecutive null entries; real files only close open
// DIEs with them.
const maxNullRun = maxScopeDepth + 64

var errNoProgress = errors.New("reading DIE: offsets do not advance")

func (p *progressReader) Next() (*dwarf.Entry, error) {
	e, err := p.r.Next()
	if err != nil || e == nil {
		return e, err
	}
	// Null entries carry no offset.
	if e.Tag == 0 {
		if p.nulls++; p.nulls > maxNullRun {
			return nil, errNoProgress
		}
		return e, nil
	}
	p.nulls = 0
	if p.read && e.Offset <= p.last {
		return nil, errNoProgress
	}
	p.last, p.read = e.Offset, true
	return e, nil
}
