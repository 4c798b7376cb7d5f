package symbolize

import (
	"debug/elf"
	"sort"
)

// elfFunc is one function symbol from .symtab or .dynsym.
type elfFunc struct {
	start, size uint64
	name        string
	// file is the STT_FILE symbol preceding a local symbol: the source file
	// the symbol came from, known even without DWARF.
	file string
}

// covers reports whether addr lies in f. A zero-size symbol covers only its
// own start: stretching it to the next symbol would credit padding and
// unnamed code to whatever happens to precede it.
func (f *elfFunc) covers(addr uint64) bool {
	if f.size == 0 {
		return addr == f.start
	}
	return addr >= f.start && addr-f.start < f.size
}

// elfSymbolTable holds function symbols sorted by start address, one per
// address.
type elfSymbolTable struct {
	funcs []elfFunc
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

// newELFSymbolTable keeps the defined STT_FUNC and STT_GNU_IFUNC symbols of
// syms. Several symbols at one address are aliases of the same code: the
// entry takes its name from the best binding (then the larger size, then the
// lexically smallest name, so the choice does not depend on symbol table
// order) and its size from the largest alias.
func newELFSymbolTable(syms []elf.Symbol) *elfSymbolTable {
	type candidate struct {
		elfFunc
		rank int
	}
	cands := make([]candidate, 0, len(syms))
	file := ""
	for _, s := range syms {
		typ := elf.ST_TYPE(s.Info)
		if typ == elf.STT_FILE {
			file = s.Name
			continue
		}
		if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC {
			continue
		}
		if s.Section == elf.SHN_UNDEF || s.Name == "" {
			continue
		}
		var from string
		if elf.ST_BIND(s.Info) == elf.STB_LOCAL {
			from = file
		}
		cands = append(cands, candidate{
			elfFunc: elfFunc{start: s.Value, size: s.Size, name: s.Name, file: from},
			rank:    bindingRank(elf.ST_BIND(s.Info)),
		})
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := &cands[i], &cands[j]
		if a.start != b.start {
			return a.start < b.start
		}
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.size != b.size {
			return a.size > b.size
		}
		return a.name < b.name
	})
	t := &elfSymbolTable{funcs: make([]elfFunc, 0, len(cands))}
	for i := range cands {
		if i > 0 && cands[i].start == cands[i-1].start {
			last := &t.funcs[len(t.funcs)-1]
			last.size = max(last.size, cands[i].size)
			continue
		}
		t.funcs = append(t.funcs, cands[i].elfFunc)
	}
	return t
}

// lookup returns the function covering addr.
func (t *elfSymbolTable) lookup(addr uint64) (*elfFunc, bool) {
	if t == nil {
		return nil, false
	}
	// Index of the last symbol starting at or below addr.
	i := sort.Search(len(t.funcs), func(i int) bool { return t.funcs[i].start > addr }) - 1
	// Hand-written assembly sometimes nests a small function inside a larger
	// one; look back a few entries so the enclosing one still covers
	// addresses past the inner one's end. The innermost covering symbol wins.
	for j := i; j >= 0 && j > i-maxNestedLookback; j-- {
		if f := &t.funcs[j]; f.covers(addr) {
			return f, true
		}
	}
	return nil, false
}

// maxNestedLookback bounds the backward scan of lookup so a miss stays
// O(log n).
const maxNestedLookback = 8
