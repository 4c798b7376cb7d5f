// Package elfsym indexes an ELF file's function symbols (.symtab or
// .dynsym) for lookups by address, names left in the mapped string table.
package elfsym

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"slices"
	"sort"
)

// Func is one function symbol from .symtab or .dynsym, with its name
// decoded.
type Func struct {
	Start, Size uint64
	Name        string
	// File is the STT_FILE symbol preceding a local symbol: the source file
	// the symbol came from, known even without DWARF.
	File string
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

// Table holds function symbols sorted by start address, one per
// address, and the string table their names are in.
type Table struct {
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

// Build indexes the defined STT_FUNC and STT_GNU_IFUNC
// symbols of r, whose names are in strtab. Several symbols at one address
// are aliases of the same code: the entry takes its name from the best
// binding (then the larger size, then the lexically smallest name, so the
// choice does not depend on symbol table order) and its size from the
// largest alias. The first entry (index 0) is the null symbol.
func Build(r Reader, strtab []byte) *Table {
	type candidate struct {
		elfSym
		rank int8
	}
	// Counted first, so the candidates take one allocation of their size:
	// growing the slice cost more than the second pass over the table.
	n := 0
	for i := 1; i < r.Count(); i++ {
		if s := r.at(i); indexedFunc(s, strtab) {
			n++
		}
	}
	cands := make([]candidate, 0, n)
	file := noName
	for i := 1; i < r.Count(); i++ {
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
		return bytes.Compare(CString(strtab, a.name), CString(strtab, b.name))
	})
	t := &Table{strtab: strtab}
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

// FromSymbols indexes parsed symbols, copying their names into a
// string table of its own.
func FromSymbols(syms []elf.Symbol) *Table {
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
	return Build(Reader{data: raw, order: binary.LittleEndian, is64: true}, strtab)
}

// Len returns the number of functions indexed.
func (t *Table) Len() int { return len(t.funcs) }

// Cost is the heap the index holds; the string table is the mapped file,
// or counted by whoever copied it.
func (t *Table) Cost() int64 { return int64(cap(t.funcs))*elfSymSize + 64 }

// Lookup returns the function covering addr.
func (t *Table) Lookup(addr uint64) (Func, bool) {
	if t == nil {
		return Func{}, false
	}
	// Index of the last symbol starting at or below addr.
	i := sort.Search(len(t.funcs), func(i int) bool { return t.funcs[i].start > addr }) - 1
	// Hand-written assembly sometimes nests a small function inside a larger
	// one; look back a few entries so the enclosing one still covers
	// addresses past the inner one's end. The innermost covering symbol wins.
	for j := i; j >= 0 && j > i-MaxNestedLookback; j-- {
		if f := &t.funcs[j]; f.covers(addr) {
			return Func{Start: f.start, Size: f.size, Name: string(CString(t.strtab, f.name)), File: string(CString(t.strtab, f.file))}, true
		}
	}
	return Func{}, false
}

// MaxNestedLookback bounds the backward scan of a lookup by address for
// a function nesting the one found (hand-written assembly), so a miss
// stays O(log n); DWARF lookups scan as far.
const MaxNestedLookback = 8
