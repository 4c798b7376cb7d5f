package probesite

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/bpfcol/bpfcol/internal/symbolize"
)

// ErrNoSymbol reports a function the binary does not have.
var ErrNoSymbol = symbolize.ErrNoFunction

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

// Binary is one opened ELF file. Symbol tables are parsed on first use, by
// the symbolizer's readers.
type Binary struct {
	elf  *elf.File
	isGo bool
	syms *symbolize.Binary // owns the file
}

// Open parses the ELF headers of f, whose symbol tables, once parsed, are
// held in tables. It takes ownership of f: f is closed on error, and by
// Close otherwise.
func Open(f *os.File, tables *symbolize.Tables) (*Binary, error) {
	sb, err := symbolize.OpenBinary(f, tables)
	if err != nil {
		return nil, err
	}
	return &Binary{elf: sb.ELF(), isGo: sb.IsGo(), syms: sb}, nil
}

// Close closes the file.
func (b *Binary) Close() error { return b.syms.Close() }

// IsGo reports whether the Go toolchain built the binary.
func (b *Binary) IsGo() bool { return b.isGo }

// Spec is a parsed function reference: "name", "name+0x10",
// "name@@VERSION" or "name@VERSION+16"; or a USDT reference
// "usdt:provider:name", which sets Provider.
type Spec struct {
	// Provider is the USDT provider of a USDT reference, empty otherwise.
	Provider string
	// Name is the function's, or the USDT probe's name.
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
	if rest, ok := strings.CutPrefix(s, usdtPrefix); ok {
		provider, name, ok := strings.Cut(rest, ":")
		if !ok || provider == "" || name == "" || strings.Contains(name, ":") {
			return spec, fmt.Errorf("%q: a USDT reference is usdt:provider:name", s)
		}
		spec.Provider, spec.Name = provider, name
		return spec, nil
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

// Lookup finds the function spec names, through the symbolizer's readers:
// .gopclntab first for Go (stripped Go included), then .symtab and .dynsym
// with versions, then demangled C++ names.
func (b *Binary) Lookup(spec Spec) (Function, error) {
	fn, err := b.syms.LookupFunction(spec.Name, spec.Version)
	if err != nil {
		return Function{}, err
	}
	return Function{Name: fn.Name, Start: fn.Start, End: fn.End, Go: fn.Go}, nil
}

// FileOffset converts an ELF virtual address in an executable segment into
// the file offset uprobes are attached at.
func (b *Binary) FileOffset(vaddr uint64) (uint64, error) {
	off, _, ok := b.syms.Mapper().VirtualAddressToFileOffset(vaddr)
	if !ok {
		return 0, fmt.Errorf("address %#x is in no executable segment", vaddr)
	}
	return off, nil
}

// code reads the bytes of [start, end) through the segment holding them.
func (b *Binary) code(start, end uint64) ([]byte, error) {
	if end <= start || end-start > 1<<20 {
		return nil, fmt.Errorf("reading code %#x-%#x: bad range", start, end)
	}
	buf, err := b.syms.ReadCode(start, int(end-start))
	if err != nil {
		return nil, err
	}
	if uint64(len(buf)) < end-start {
		return nil, fmt.Errorf("reading code %#x-%#x: the segment ends at %#x", start, end, start+uint64(len(buf)))
	}
	return buf, nil
}
