package dwarfsym

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/bpfcol/bpfcol/internal/elfbin"
)

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
			u = unitTables{err: elfbin.Recovered(r, fmt.Sprintf("decoding DWARF unit at 0x%x", start.off))}
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
