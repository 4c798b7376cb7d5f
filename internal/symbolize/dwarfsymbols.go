package symbolize

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"sort"
)

// dwarfTable answers lookups from DWARF: the function, file:line and the
// chain of inlined calls at an address. It is built once per binary into
// flat sorted slices so a lookup is a few binary searches.
type dwarfTable struct {
	lines  []lineRow
	funcs  []scopeRange // outermost subprogram ranges, sorted by lo
	scopes []dwarfScope
	size   int64 // rough heap footprint, for size-bounded caches
}

// lineRow is one row of the merged line tables. end marks the address
// just past a sequence: no line there.
type lineRow struct {
	addr uint64
	file string
	line int32
	end  bool
}

// scopeRange is one address range of a subprogram or inlined call.
type scopeRange struct {
	lo, hi uint64
	scope  int32
}

// dwarfScope is a subprogram or an inlined subroutine.
type dwarfScope struct {
	name string // raw (mangled) name; demangled at lookup
	// callFile and callLine say where this scope was inlined into its
	// parent; zero for subprograms.
	callFile string
	callLine int32
	children []scopeRange // ranges of inlined calls directly inside, sorted by lo
}

const (
	attrMIPSLinkageName = dwarf.Attr(0x2007)
	tagPartialUnit      = dwarf.Tag(0x3c)
	tagSkeletonUnit     = dwarf.Tag(0x4a)
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

// newDWARFTable reads every compile unit's line table and function tree.
func newDWARFTable(d *dwarf.Data) (t *dwarfTable, err error) {
	// debug/dwarf reports most corruption as errors, but a hostile file
	// must never take the profiler down.
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("decoding DWARF: %v", r)
		}
	}()
	t = &dwarfTable{}
	names := &dwarfNames{d: d, r: d.Reader(), cache: map[dwarf.Offset]dieNames{}}
	r := &progressReader{r: d.Reader()}
	type childOf struct {
		parent int32
		sr     scopeRange
	}
	var inlined []childOf
	for {
		cu, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("reading compile unit: %w", err)
		}
		if cu == nil {
			break
		}
		if cu.Tag != dwarf.TagCompileUnit && cu.Tag != tagPartialUnit && cu.Tag != tagSkeletonUnit {
			if cu.Children {
				if err := skipChildren(r); err != nil {
					return nil, err
				}
			}
			continue
		}
		files := t.addLines(d, cu)
		fileName := func(e *dwarf.Entry) string {
			idx, ok := e.Val(dwarf.AttrCallFile).(int64)
			if !ok || idx < 0 || idx >= int64(len(files)) || files[idx] == nil {
				return ""
			}
			return files[idx].Name
		}
		if !cu.Children {
			continue
		}
		// stack holds, per open DIE, the innermost enclosing scope (-1 for
		// none).
		stack := []int32{-1}
		for len(stack) > 0 {
			e, err := r.Next()
			if err != nil {
				return nil, fmt.Errorf("reading DIE: %w", err)
			}
			if e == nil {
				return nil, errors.New("reading DIE: unit ends inside a DIE tree")
			}
			if e.Tag == 0 {
				stack = stack[:len(stack)-1]
				continue
			}
			top := stack[len(stack)-1]
			push := top
			switch e.Tag {
			case dwarf.TagSubprogram:
				ranges, _ := d.Ranges(e)
				if len(ranges) > 0 {
					idx := int32(len(t.scopes))
					t.scopes = append(t.scopes, dwarfScope{name: names.of(e)})
					for _, rg := range ranges {
						if rg[1] > rg[0] && rg[0] != 0 {
							t.funcs = append(t.funcs, scopeRange{lo: rg[0], hi: rg[1], scope: idx})
						}
					}
					push = idx
				}
			case dwarf.TagInlinedSubroutine:
				if top < 0 {
					break
				}
				ranges, _ := d.Ranges(e)
				if len(ranges) == 0 {
					break
				}
				line, _ := e.Val(dwarf.AttrCallLine).(int64)
				idx := int32(len(t.scopes))
				t.scopes = append(t.scopes, dwarfScope{name: names.of(e), callFile: fileName(e), callLine: int32(line)})
				for _, rg := range ranges {
					if rg[1] > rg[0] {
						inlined = append(inlined, childOf{parent: top, sr: scopeRange{lo: rg[0], hi: rg[1], scope: idx}})
					}
				}
				push = idx
			case dwarf.TagStructType, dwarf.TagClassType, dwarf.TagUnionType, dwarf.TagEnumerationType,
				dwarf.TagSubroutineType, dwarf.TagArrayType:
				// Types hold no code; their member declarations are
				// reached through DW_AT_specification when needed.
				if e.Children {
					if err := skipChildren(r); err != nil {
						return nil, err
					}
				}
				continue
			}
			if e.Children {
				if len(stack) >= maxScopeDepth {
					return nil, errors.New("reading DIE: nesting too deep")
				}
				stack = append(stack, push)
			}
		}
	}
	for _, c := range inlined {
		t.scopes[c.parent].children = append(t.scopes[c.parent].children, c.sr)
	}
	for i := range t.scopes {
		ch := t.scopes[i].children
		sort.Slice(ch, func(a, b int) bool { return ch[a].lo < ch[b].lo })
	}
	sort.SliceStable(t.funcs, func(a, b int) bool { return t.funcs[a].lo < t.funcs[b].lo })
	sort.SliceStable(t.lines, func(a, b int) bool {
		x, y := &t.lines[a], &t.lines[b]
		if x.addr != y.addr {
			return x.addr < y.addr
		}
		// A sequence ending where the next starts yields to the start.
		return x.end && !y.end
	})
	t.size = int64(len(t.lines))*48 + int64(len(t.funcs)+len(inlined))*24 + int64(len(t.scopes))*64
	if len(t.funcs) == 0 && len(t.lines) == 0 {
		return nil, errors.New("decoding DWARF: no functions and no lines")
	}
	return t, nil
}

// addLines appends the rows of cu's line table, one per address (the last
// row at an address wins, as in llvm-symbolizer), and returns the unit's
// file table for DW_AT_call_file.
func (t *dwarfTable) addLines(d *dwarf.Data, cu *dwarf.Entry) []*dwarf.LineFile {
	lr, err := d.LineReader(cu)
	if err != nil || lr == nil {
		return nil
	}
	var (
		le       dwarf.LineEntry
		seq      []lineRow
		interned = map[*dwarf.LineFile]string{}
	)
	flush := func(endAddr uint64) {
		// Rows at or past the end address cover nothing.
		for len(seq) > 0 && seq[len(seq)-1].addr >= endAddr {
			seq = seq[:len(seq)-1]
		}
		// Sequences at address 0 are code the linker dropped.
		if len(seq) > 0 && seq[0].addr != 0 {
			t.lines = append(t.lines, seq...)
			t.lines = append(t.lines, lineRow{addr: endAddr, end: true})
		}
		seq = seq[:0]
	}
	for {
		if err := lr.Next(&le); err != nil {
			break // io.EOF, or a corrupt table: keep what was read
		}
		if le.EndSequence {
			flush(le.Address)
			continue
		}
		name := ""
		if le.File != nil {
			var ok bool
			if name, ok = interned[le.File]; !ok {
				name = le.File.Name
				interned[le.File] = name
			}
		}
		row := lineRow{addr: le.Address, file: name, line: int32(le.Line)}
		if n := len(seq); n > 0 && seq[n-1].addr == row.addr {
			seq[n-1] = row
			continue
		}
		if n := len(seq); n > 0 && row.addr < seq[n-1].addr {
			// Addresses go backwards only in a corrupt table.
			break
		}
		seq = append(seq, row)
	}
	return lr.Files()
}

// lineAt returns the file and line of pc.
func (t *dwarfTable) lineAt(pc uint64) (string, int32, bool) {
	i := sort.Search(len(t.lines), func(i int) bool { return t.lines[i].addr > pc }) - 1
	if i < 0 || t.lines[i].end {
		return "", 0, false
	}
	return t.lines[i].file, t.lines[i].line, true
}

// findRange returns the range in rs (sorted by lo) covering pc.
func findRange(rs []scopeRange, pc uint64) (int32, bool) {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].lo > pc }) - 1
	// Ranges rarely overlap; look back a few so an enclosing one is found.
	for j := i; j >= 0 && j > i-maxNestedLookback; j-- {
		if pc < rs[j].hi {
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
		next, ok := findRange(t.scopes[cur].children, pc)
		if !ok {
			break
		}
		scopes = append(scopes, next)
		cur = next
	}
	frames := make([]Frame, len(scopes))
	for i := range scopes {
		s := &t.scopes[scopes[len(scopes)-1-i]]
		frames[i].Function = demangleName(s.name)
		if i == 0 {
			frames[i].File, frames[i].Line = file, int64(line)
		} else {
			inner := &t.scopes[scopes[len(scopes)-i]]
			frames[i].File, frames[i].Line = inner.callFile, int64(inner.callLine)
		}
	}
	return frames, true
}

// skipChildren skips the children of the entry just read. Unlike
// dwarf.Reader.SkipChildren it never follows DW_AT_sibling, which a corrupt
// file can point backwards into an endless loop.
func skipChildren(r *progressReader) error {
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
