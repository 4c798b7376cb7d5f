package probesite

import (
	"debug/elf"
	"debug/gosym"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
)

// ErrNoSymbol reports a function the binary does not have.
var ErrNoSymbol = errors.New("symbol not found")

// maxPclntab bounds how much of a binary's .gopclntab is read.
const maxPclntab = 512 << 20

// Function is one function found in a binary.
type Function struct {
	// Name is the name it was found under.
	Name string
	// Start is its ELF virtual address; End is the address after its last
	// byte, or Start when the symbol has no size.
	Start, End uint64
	// Go is set for Go code (found in .gopclntab): such functions must
	// never get a uretprobe and their scopes are keyed by goroutine.
	Go bool
}

// Binary is one opened ELF file. Symbol tables are parsed on first use.
type Binary struct {
	file *os.File
	elf  *elf.File
	isGo bool

	once    sync.Once
	symbols []elf.Symbol // .symtab then .dynsym, functions only
	goTable *gosym.Table
	loadErr error
}

// Open parses the ELF headers of f. It takes ownership of f: f is closed on
// error, and by Close otherwise.
func Open(f *os.File) (*Binary, error) {
	ef, err := elf.NewFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("parsing ELF headers of %s: %w", f.Name(), err)
	}
	b := &Binary{file: f, elf: ef}
	b.isGo = pclntabSection(ef) != nil || ef.Section(".go.buildinfo") != nil
	return b, nil
}

// Close closes the file.
func (b *Binary) Close() error { return b.file.Close() }

// IsGo reports whether the Go toolchain built the binary.
func (b *Binary) IsGo() bool { return b.isGo }

func pclntabSection(f *elf.File) *elf.Section {
	for _, name := range []string{".gopclntab", ".data.rel.ro.gopclntab"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			return s
		}
	}
	return nil
}

func (b *Binary) load() error {
	b.once.Do(func() {
		var errs []error
		for _, read := range []func() ([]elf.Symbol, error){b.elf.Symbols, b.elf.DynamicSymbols} {
			syms, err := read()
			if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
				errs = append(errs, err)
			}
			for _, s := range syms {
				typ := elf.ST_TYPE(s.Info)
				// An IFUNC symbol is its resolver, not the function callers reach.
				if typ == elf.STT_FUNC && s.Section != elf.SHN_UNDEF && s.Value != 0 {
					b.symbols = append(b.symbols, s)
				}
			}
		}
		if b.isGo {
			t, err := b.loadGoTable()
			if err != nil {
				errs = append(errs, err)
			}
			b.goTable = t
		}
		if len(b.symbols) == 0 && b.goTable == nil {
			b.loadErr = errors.Join(append([]error{errors.New("no symbol table")}, errs...)...)
		}
	})
	return b.loadErr
}

// loadGoTable decodes .gopclntab. debug/gosym indexes slices with values read
// from the file, so a corrupt table must not take the collector down.
func (b *Binary) loadGoTable() (t *gosym.Table, err error) {
	sect := pclntabSection(b.elf)
	if sect == nil {
		return nil, nil
	}
	if sect.Size > maxPclntab {
		return nil, fmt.Errorf(".gopclntab is %d bytes, over the %d limit", sect.Size, maxPclntab)
	}
	data, err := sect.Data()
	if err != nil {
		return nil, fmt.Errorf("reading .gopclntab: %w", err)
	}
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("decoding .gopclntab: %v", r)
		}
	}()
	t, err = gosym.NewTable(nil, gosym.NewLineTable(data, b.goTextStart(data)))
	if err != nil {
		return nil, fmt.Errorf("decoding .gopclntab: %w", err)
	}
	return t, nil
}

// goTextStart finds runtime.text, the base of .gopclntab's offsets: the
// symbol when present, else the word the linker stores in the pcHeader
// (Go 1.18+, zero in PIE files), else the start of .text.
func (b *Binary) goTextStart(pclntab []byte) uint64 {
	for _, s := range b.symbols {
		if s.Name == "runtime.text" {
			return s.Value
		}
	}
	text := b.elf.Section(".text")
	if text == nil {
		return 0
	}
	if len(pclntab) >= 8 && pclntab[7] == 8 && len(pclntab) >= 8+3*8 {
		v := b.elf.ByteOrder.Uint64(pclntab[8+2*8:])
		if v >= text.Addr && v < text.Addr+text.Size {
			return v
		}
	}
	return text.Addr
}

// Spec is a parsed function reference: "name", "name+0x10",
// "name@@VERSION" or "name@VERSION+16".
type Spec struct {
	Name    string
	Version string // empty: any, preferring the default version
	Offset  uint64
}

// ParseSpec parses a function reference. A trailing "+N" is an offset only
// when N is a number, so C++ names such as "operator+" stay whole.
func ParseSpec(s string) (Spec, error) {
	var spec Spec
	if s == "" {
		return spec, errors.New("empty function name")
	}
	if i := strings.LastIndexByte(s, '+'); i > 0 {
		if off, err := strconv.ParseUint(s[i+1:], 0, 64); err == nil {
			spec.Offset = off
			s = s[:i]
		}
	}
	// Versions follow the last "@" outside a C++ signature.
	if i := strings.Index(s, "@"); i > 0 && !strings.ContainsAny(s[i:], "()<>:") {
		spec.Version = strings.TrimLeft(s[i:], "@")
		s = s[:i]
	}
	spec.Name = s
	return spec, nil
}

// Lookup finds the function spec names. Go's .gopclntab wins for Go
// binaries; then exact names in .symtab and .dynsym, a version matching
// when one is given; then demangled C++ names, with or without parameters.
func (b *Binary) Lookup(spec Spec) (Function, error) {
	if err := b.load(); err != nil {
		return Function{}, fmt.Errorf("looking up %s: %w", spec.Name, err)
	}
	if b.goTable != nil && spec.Version == "" {
		if fn := b.goTable.LookupFunc(spec.Name); fn != nil {
			return Function{Name: fn.Name, Start: fn.Entry, End: fn.End, Go: true}, nil
		}
	}
	if fn, ok, err := b.lookupELF(spec, func(s *elf.Symbol) bool { return s.Name == spec.Name }); ok || err != nil {
		return fn, err
	}
	if looksDemangled(spec.Name) {
		match := func(s *elf.Symbol) bool {
			if !strings.HasPrefix(s.Name, "_Z") {
				return false
			}
			if full, err := demangle.ToString(s.Name); err == nil && full == spec.Name {
				return true
			}
			short, err := demangle.ToString(s.Name, demangle.NoParams)
			return err == nil && short == spec.Name
		}
		if fn, ok, err := b.lookupELF(spec, match); ok || err != nil {
			return fn, err
		}
	}
	return Function{}, fmt.Errorf("looking up %s: %w", spec.Name, ErrNoSymbol)
}

func looksDemangled(name string) bool { return strings.ContainsAny(name, ":()<> ") }

// lookupELF picks among the matching symbols: a requested version must
// match; otherwise the default (not hidden) version, then global before
// weak before local. Different addresses at the best rank are ambiguous.
func (b *Binary) lookupELF(spec Spec, match func(*elf.Symbol) bool) (Function, bool, error) {
	best, bestRank := -1, 1<<30
	ambiguous := false
	for i := range b.symbols {
		s := &b.symbols[i]
		if !match(s) {
			continue
		}
		if spec.Version != "" && s.Version != spec.Version {
			continue
		}
		rank := 0
		if s.HasVersion && s.VersionIndex.IsHidden() {
			rank += 10
		}
		switch elf.ST_BIND(s.Info) {
		case elf.STB_WEAK:
			rank++
		case elf.STB_LOCAL:
			rank += 2
		}
		switch {
		case rank < bestRank:
			best, bestRank, ambiguous = i, rank, false
		case rank == bestRank && s.Value != b.symbols[best].Value:
			ambiguous = true
		}
	}
	if best < 0 {
		return Function{}, false, nil
	}
	s := b.symbols[best]
	if ambiguous {
		return Function{}, true, fmt.Errorf("looking up %s: several functions of that name at different addresses", spec.Name)
	}
	fn := Function{Name: s.Name, Start: s.Value, End: s.Value + s.Size}
	// Go functions also have .symtab entries: key them by goroutine too.
	if b.goTable != nil {
		if g := b.goTable.PCToFunc(s.Value); g != nil && g.Entry == s.Value {
			fn.Go, fn.End = true, g.End
		}
	}
	return fn, true, nil
}

// FileOffset converts an ELF virtual address in an executable segment into
// the file offset uprobes are attached at.
func (b *Binary) FileOffset(vaddr uint64) (uint64, error) {
	for _, p := range b.elf.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && vaddr >= p.Vaddr && vaddr-p.Vaddr < p.Filesz {
			return vaddr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("address %#x is in no executable segment", vaddr)
}

// code reads the bytes of [start, end) through the segment holding them.
func (b *Binary) code(start, end uint64) ([]byte, error) {
	if end <= start || end-start > 1<<20 {
		return nil, fmt.Errorf("reading code %#x-%#x: bad range", start, end)
	}
	off, err := b.FileOffset(start)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, end-start)
	if _, err := b.file.ReadAt(buf, int64(off)); err != nil {
		return nil, fmt.Errorf("reading code at %#x: %w", start, err)
	}
	return buf, nil
}
