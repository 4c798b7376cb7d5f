package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"slices"
	"sort"
)

// elfFunc is one function symbol from .symtab or .dynsym, with its name
// decoded.
type elfFunc struct {
	start, size uint64
	name        string
	// file is the STT_FILE symbol preceding a local symbol: the source file
	// the symbol came from, known even without DWARF.
	file string
}

// elfSym is a function symbol as the index keeps it: names stay in the
// string table, which is the mapped file.
type elfSym struct {
	start, size uint64
	name, file  uint32 // offsets in strtab; noName for none
}

const noName = ^uint32(0)

// elfSymSize is the heap an index entry takes.
const elfSymSize = 24

// covers reports whether addr lies in f. A zero-size symbol covers only its
// own start: stretching it to the next symbol would credit padding and
// unnamed code to whatever happens to precede it.
func (f *elfSym) covers(addr uint64) bool {
	if f.size == 0 {
		return addr == f.start
	}
	return addr >= f.start && addr-f.start < f.size
}

// elfSymbolTable holds function symbols sorted by start address, one per
// address, and the string table their names are in.
type elfSymbolTable struct {
	funcs  []elfSym
	strtab []byte
}

// bindingRank orders symbol bindings for aliases at the same address:
// global beats weak beats local, because the global name is what callers
// and other tools (addr2line, perf) show.
func bindingRank(b elf.SymBind) int {
	switch b {
	case elf.STB_GLOBAL:
		return 0
	case elf.STB_WEAK:
		return 1
	case elf.STB_LOCAL:
		return 2
	default:
		return 3
	}
}

// rawSym is one symbol table entry, read in place.
type rawSym struct {
	name        uint32
	info        byte
	shndx       uint16
	value, size uint64
}

// symbolReader walks a .symtab or .dynsym section without copying it.
type symbolReader struct {
	data  []byte
	order binary.ByteOrder
	is64  bool
}

func (r symbolReader) entSize() int {
	if r.is64 {
		return 24
	}
	return 16
}

func (r symbolReader) count() int { return len(r.data) / r.entSize() }

func (r symbolReader) at(i int) rawSym {
	b := r.data[i*r.entSize():]
	if r.is64 {
		return rawSym{
			name: r.order.Uint32(b), info: b[4], shndx: r.order.Uint16(b[6:]),
			value: r.order.Uint64(b[8:]), size: r.order.Uint64(b[16:]),
		}
	}
	return rawSym{
		name: r.order.Uint32(b), value: uint64(r.order.Uint32(b[4:])), size: uint64(r.order.Uint32(b[8:])),
		info: b[12], shndx: r.order.Uint16(b[14:]),
	}
}

// cstring returns the NUL-terminated string at off of tab, nil when off is
// outside it.
func cstring(tab []byte, off uint32) []byte {
	if off == noName || uint64(off) >= uint64(len(tab)) {
		return nil
	}
	s := tab[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// buildELFSymbolTable indexes the defined STT_FUNC and STT_GNU_IFUNC
// symbols of r, whose names are in strtab. Several symbols at one address
// are aliases of the same code: the entry takes its name from the best
// binding (then the larger size, then the lexically smallest name, so the
// choice does not depend on symbol table order) and its size from the
// largest alias. The first entry (index 0) is the null symbol.
func buildELFSymbolTable(r symbolReader, strtab []byte) *elfSymbolTable {
	type candidate struct {
		elfSym
		rank int8
	}
	// Counted first, so the candidates take one allocation of their size:
	// growing the slice cost more than the second pass over the table.
	n := 0
	for i := 1; i < r.count(); i++ {
		if s := r.at(i); indexedFunc(s, strtab) {
			n++
		}
	}
	cands := make([]candidate, 0, n)
	file := noName
	for i := 1; i < r.count(); i++ {
		s := r.at(i)
		if elf.ST_TYPE(s.info) == elf.STT_FILE {
			file = s.name
			continue
		}
		if !indexedFunc(s, strtab) {
			continue
		}
		from := noName
		if elf.ST_BIND(s.info) == elf.STB_LOCAL {
			from = file
		}
		cands = append(cands, candidate{
			elfSym: elfSym{start: s.value, size: s.size, name: s.name, file: from},
			rank:   int8(bindingRank(elf.ST_BIND(s.info))),
		})
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		switch {
		case a.start != b.start:
			if a.start < b.start {
				return -1
			}
			return 1
		case a.rank != b.rank:
			return int(a.rank) - int(b.rank)
		case a.size != b.size:
			if a.size > b.size {
				return -1
			}
			return 1
		}
		return bytes.Compare(cstring(strtab, a.name), cstring(strtab, b.name))
	})
	t := &elfSymbolTable{strtab: strtab}
	n = 0
	for i := range cands {
		if i == 0 || cands[i].start != cands[i-1].start {
			n++
		}
	}
	t.funcs = make([]elfSym, 0, n)
	for i := range cands {
		if i > 0 && cands[i].start == cands[i-1].start {
			last := &t.funcs[len(t.funcs)-1]
			last.size = max(last.size, cands[i].size)
			continue
		}
		t.funcs = append(t.funcs, cands[i].elfSym)
	}
	return t
}

// indexedFunc reports whether s is a defined, named function symbol. A
// name is empty when its first byte is NUL: the test needs no scan for
// the name's end.
func indexedFunc(s rawSym, strtab []byte) bool {
	typ := elf.ST_TYPE(s.info)
	if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC {
		return false
	}
	if elf.SectionIndex(s.shndx) == elf.SHN_UNDEF || s.name == noName || uint64(s.name) >= uint64(len(strtab)) {
		return false
	}
	return strtab[s.name] != 0
}

// newELFSymbolTable indexes parsed symbols, copying their names into a
// string table of its own.
func newELFSymbolTable(syms []elf.Symbol) *elfSymbolTable {
	var strtab []byte
	raw := make([]byte, 24*(len(syms)+1))
	for i, s := range syms {
		b := raw[24*(i+1):]
		binary.LittleEndian.PutUint32(b, uint32(len(strtab)))
		strtab = append(append(strtab, s.Name...), 0)
		b[4] = s.Info
		binary.LittleEndian.PutUint16(b[6:], uint16(s.Section))
		binary.LittleEndian.PutUint64(b[8:], s.Value)
		binary.LittleEndian.PutUint64(b[16:], s.Size)
	}
	return buildELFSymbolTable(symbolReader{data: raw, order: binary.LittleEndian, is64: true}, strtab)
}

// cost is the heap the index holds; the string table is the mapped file,
// or counted by whoever copied it.
func (t *elfSymbolTable) cost() int64 { return int64(cap(t.funcs))*elfSymSize + 64 }

// lookup returns the function covering addr.
func (t *elfSymbolTable) lookup(addr uint64) (elfFunc, bool) {
	if t == nil {
		return elfFunc{}, false
	}
	// Index of the last symbol starting at or below addr.
	i := sort.Search(len(t.funcs), func(i int) bool { return t.funcs[i].start > addr }) - 1
	// Hand-written assembly sometimes nests a small function inside a larger
	// one; look back a few entries so the enclosing one still covers
	// addresses past the inner one's end. The innermost covering symbol wins.
	for j := i; j >= 0 && j > i-maxNestedLookback; j-- {
		if f := &t.funcs[j]; f.covers(addr) {
			return elfFunc{start: f.start, size: f.size, name: string(cstring(t.strtab, f.name)), file: string(cstring(t.strtab, f.file))}, true
		}
	}
	return elfFunc{}, false
}

// maxNestedLookback bounds the backward scan of lookup so a miss stays
// O(log n).
const maxNestedLookback = 8
