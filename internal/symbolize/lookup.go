package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/ianlancetaylor/demangle"
)

// ErrNoFunction reports a function name the binary does not have.
var ErrNoFunction = errors.New("function not found")

// FunctionSymbol is a function found by name.
type FunctionSymbol struct {
	// Name is the symbol it was found under: the mangled name when a
	// demangled one was asked for.
	Name string
	// Start is its ELF virtual address. End is the address after its last
	// byte, or Start when the symbol has no size.
	Start, End uint64
	// Go is set for code the Go toolchain compiled (covered by .gopclntab).
	Go bool
}

// namedSymbol is one defined function symbol of .symtab or .dynsym, kept
// with what a lookup by name ranks on. Aliases stay separate entries.
type namedSymbol struct {
	name, version string
	hidden        bool // a non-default version (name@VER, not name@@VER)
	bind          elf.SymBind
	start, size   uint64
}

// nameIndex is every named function symbol, sorted by name. It is built on
// the first lookup by name only: symbolization never needs it.
type nameIndex struct {
	once sync.Once
	syms []namedSymbol
	err  error
}

// ELF returns the parsed headers, for callers that read sections or code
// themselves. The Binary owns the underlying file.
func (b *Binary) ELF() *elf.File { return b.f.ELF }

// LookupFunction finds the function called name. Go binaries are searched
// through .gopclntab first (stripped ones included) unless a version is
// given. Then exact names in .symtab and .dynsym; version, when not empty,
// must match a versioned dynamic symbol (getaddrinfo with GLIBC_2.2.5).
// Then demangled C++ and Rust names, with or without parameters. Among
// matches, the default version beats hidden ones, then global beats weak
// beats local; several addresses at the best rank are an error.
func (b *Binary) LookupFunction(name, version string) (fs FunctionSymbol, err error) {
	defer elfbin.GuardFaults()()
	defer func() {
		// A fault reading the mapped file (truncated meanwhile).
		if r := recover(); r != nil {
			fs, err = FunctionSymbol{}, elfbin.Recovered(r, fmt.Sprintf("looking up %s: reading %s", name, b.f.OS.Name()))
		}
	}()
	if name == "" {
		return FunctionSymbol{}, errors.New("looking up a function: empty name")
	}
	if b.f.IsGo {
		b.loadSymbols()
		if version == "" && b.goSyms != nil {
			// go tool nm shows assembly and cgo wrappers with their ABI
			// suffix, which .gopclntab does not carry.
			for _, n := range []string{name, strings.TrimSuffix(name, ".abi0")} {
				if start, end, ok := b.goSyms.LookupFunc(n); ok {
					return FunctionSymbol{Name: n, Start: start, End: end, Go: true}, nil
				}
			}
		}
	}
	syms, err := b.namedSymbols()
	if err != nil && (!b.f.IsGo || b.goSyms == nil) {
		// A stripped binary simply lacks the function.
		return FunctionSymbol{}, fmt.Errorf("looking up %s: %w: %w", name, ErrNoFunction, err)
	}
	i := sort.Search(len(syms), func(i int) bool { return syms[i].name >= name })
	j := i
	for j < len(syms) && syms[j].name == name {
		j++
	}
	if fn, ok, err := b.pickFunction(name, version, syms[i:j]); ok || err != nil {
		return fn, err
	}
	// A plain identifier may be a C++ function of the global namespace
	// without its parameters (helper for _Z6helperi), as perf and gdb
	// show it; one that needs no identifier in the mangled name (a
	// keyword) would have every mangled name demangled, and is no such
	// function anyway.
	if strings.ContainsAny(name, ":()<> ") || (plainIdentifier(name) && len(mangledNeedles(name)) > 0) {
		matched := demangledMatches(syms, name)
		if fn, ok, err := b.pickFunction(name, version, matched); ok || err != nil {
			return fn, err
		}
	}
	return FunctionSymbol{}, fmt.Errorf("looking up %s: %w", name, ErrNoFunction)
}

// plainIdentifier reports whether name is one C identifier.
func plainIdentifier(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !identStart(c) && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return name != ""
}

// demangledMatch reports whether the mangled symbol sym demangles to want,
// in any of the forms users copy from tools: c++filt's, llvm-symbolizer's,
// or without parameters.
func demangledMatch(sym, want string) bool {
	if !strings.HasPrefix(sym, "_Z") && !strings.HasPrefix(sym, "_R") {
		return false
	}
	for _, opts := range [][]demangle.Option{nil, {demangle.LLVMStyle}, {demangle.NoParams}} {
		if d, err := demangle.ToString(sym, opts...); err == nil && d == want {
			return true
		}
	}
	return false
}

// pickFunction ranks the symbols matching name (see LookupFunction).
func (b *Binary) pickFunction(name, version string, cands []namedSymbol) (FunctionSymbol, bool, error) {
	best, bestRank := -1, 1<<30
	ambiguous := false
	for i := range cands {
		s := &cands[i]
		if version != "" && s.version != version {
			continue
		}
		rank := 0
		if s.hidden {
			rank += 10
		}
		switch s.bind {
		case elf.STB_WEAK:
			rank++
		case elf.STB_LOCAL:
			rank += 2
		}
		switch {
		case rank < bestRank:
			best, bestRank, ambiguous = i, rank, false
		case rank == bestRank && s.start != cands[best].start:
			ambiguous = true
		}
	}
	if best < 0 {
		return FunctionSymbol{}, false, nil
	}
	if ambiguous {
		return FunctionSymbol{}, true, ambiguityError(name, cands)
	}
	s := cands[best]
	fn := FunctionSymbol{Name: s.name, Start: s.start, End: s.start + s.size}
	// Go functions also have .symtab entries (and cgo binaries C ones):
	// .gopclntab says which code is Go, and its extent.
	if b.goSyms != nil {
		if start, end, ok := b.goSyms.FunctionRange(s.start); ok && start == s.start {
			fn.Go, fn.End = true, end
		}
	}
	return fn, true, nil
}

// namedSymbols builds the name index once: defined STT_FUNC symbols of both
// .symtab and .dynsym (only .dynsym carries versions). IFUNC symbols are left
// out: their address is the resolver, not the code callers reach.
func (b *Binary) namedSymbols() ([]namedSymbol, error) {
	idx := &b.byName
	idx.once.Do(func() {
		var errs []error
		for _, read := range []func() ([]elf.Symbol, error){b.f.ELF.Symbols, b.f.ELF.DynamicSymbols} {
			syms, err := read()
			if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
				errs = append(errs, err)
			}
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 || s.Name == "" {
					continue
				}
				idx.syms = append(idx.syms, namedSymbol{
					name:    s.Name,
					version: s.Version,
					hidden:  s.HasVersion && s.VersionIndex.IsHidden(),
					bind:    elf.ST_BIND(s.Info),
					start:   s.Value,
					size:    s.Size,
				})
			}
		}
		sort.Slice(idx.syms, func(i, j int) bool { return idx.syms[i].name < idx.syms[j].name })
		b.parsedSize.Add(int64(len(idx.syms)) * 64)
		if len(idx.syms) == 0 {
			idx.err = errors.Join(append([]error{errors.New("no function symbols")}, errs...)...)
		}
	})
	return idx.syms, idx.err
}
