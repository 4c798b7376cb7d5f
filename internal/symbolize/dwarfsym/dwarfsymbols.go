package dwarfsym

import (
	"cmp"
	"debug/dwarf"
	"errors"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/symbolize/elfsym"
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
	for j := i; j >= 0 && j > i-elfsym.MaxNestedLookback; j-- {
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
	for j := i; j >= 0 && j > i-elfsym.MaxNestedLookback; j-- {
		if uint64(pc) < uint64(rs[j].lo)+uint64(rs[j].size) {
			return rs[j].scope, true
		}
	}
	return -1, false
}

// lookup returns the frames at pc, innermost inlined call first and the
// physical function last. A frame's Function is "" when DWARF has a line but
// no function for pc.
func (t *dwarfTable) lookup(pc uint64) ([]frame.Line, bool) {
	file, line, hasLine := t.lineAt(pc)
	fn, ok := findRange(t.funcs, pc)
	if !ok {
		if !hasLine {
			return nil, false
		}
		return []frame.Line{{File: file, Line: int64(line)}}, true
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
	frames := make([]frame.Line, len(scopes))
	for i := range scopes {
		s := &t.scopes[scopes[len(scopes)-1-i]]
		// A copy: a substring would keep the unit's whole name string
		// alive in the caches of named frames after the unit's eviction.
		frames[i].Name, frames[i].SystemName = elfsym.Names(strings.Clone(t.nameOf(s)))
		if i == 0 {
			frames[i].File, frames[i].Line = file, int64(line)
		} else {
			inner := &t.scopes[scopes[len(scopes)-i]]
			frames[i].File, frames[i].Line = t.callFileOf(inner), int64(inner.callLine)
		}
	}
	return frames, true
}
