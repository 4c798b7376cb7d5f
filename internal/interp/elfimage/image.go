// Package elfimage reads an ELF file as the dynamic loader would lay it out
// in memory, without running it: symbols, the bytes at a virtual address,
// a pointer as its relocation sets it, and what a PLT stub calls. The
// interpreters read their runtime's static data (type objects, debug
// offsets, code to decode) through it.
//
// Files come from processes other users control: every section read is
// bounded, and a malformed file is an error, never a panic.
package elfimage

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"golang.org/x/arch/x86/x86asm"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/interp/x86sym"
)

// Bounds on what an Image reads from a file.
const (
	// maxSymtabBytes bounds a symbol table read (libpython's .symtab is
	// about 1 MiB).
	maxSymtabBytes = 64 << 20
	// maxRelaBytes bounds the relocations read (libpython: 1.5 MiB).
	maxRelaBytes = 64 << 20
	// MaxRead bounds one read of the image's bytes.
	MaxRead = 1 << 20
)

// Symbol is a symbol's address and size.
type Symbol struct {
	Value, Size uint64
}

// Image is an opened ELF file.
type Image struct {
	f     *elf.File
	r     io.ReaderAt
	loads []elf.ProgHeader
	syms  map[string]Symbol
	// relocs are the dynamic relocations that set a pointer-sized slot,
	// sorted by address: what the slot holds once loaded. Symbol-relative
	// ones against symbols the file does not define are left out.
	relocs []reloc
	// slots are the GOT slots of the JUMP_SLOT relocations: the function
	// each one's PLT stub jumps to.
	slots map[uint64]string
	// tlsMods are the GOT slots of R_X86_64_DTPMOD64 relocations.
	tlsMods map[uint64]bool
	// tpoffs are the GOT slots of R_X86_64_TPOFF64 relocations.
	tpoffs map[uint64]bool
}

type reloc struct {
	addr  uint64
	value uint64
}

// Open reads r's headers, symbols and dynamic relocations. Only x86-64
// files are read.
func Open(r io.ReaderAt) (img *Image, err error) {
	defer func() {
		// debug/elf panics on some malformed inputs.
		if p := recover(); p != nil {
			img, err = nil, elfbin.Recovered(p, "reading ELF file")
		}
	}()
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("reading ELF file: %w", err)
	}
	if f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("reading ELF file: %v %v, not x86-64", f.Class, f.Machine)
	}
	img = &Image{f: f, r: r, syms: map[string]Symbol{}, slots: map[uint64]string{}, tlsMods: map[uint64]bool{}, tpoffs: map[uint64]bool{}}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			img.loads = append(img.loads, p.ProgHeader)
		}
	}
	dynsyms, err := img.readSymbols(elf.SHT_DYNSYM)
	if err != nil {
		return nil, err
	}
	syms, err := img.readSymbols(elf.SHT_SYMTAB)
	if err != nil {
		return nil, err
	}
	for _, list := range [][]elf.Symbol{syms, dynsyms} {
		for _, s := range list {
			if s.Section == elf.SHN_UNDEF || s.Name == "" {
				continue
			}
			if _, ok := img.syms[s.Name]; !ok || elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
				img.syms[s.Name] = Symbol{Value: s.Value, Size: s.Size}
			}
		}
	}
	if err := img.readRelocs(dynsyms); err != nil {
		return nil, err
	}
	return img, nil
}

// readSymbols reads the symbol table of section type typ, if any.
func (img *Image) readSymbols(typ elf.SectionType) ([]elf.Symbol, error) {
	for _, s := range img.f.Sections {
		if s.Type != typ {
			continue
		}
		if s.Size > maxSymtabBytes {
			return nil, fmt.Errorf("reading %s: %d bytes, more than %d", s.Name, s.Size, maxSymtabBytes)
		}
		var syms []elf.Symbol
		var err error
		if typ == elf.SHT_DYNSYM {
			syms, err = img.f.DynamicSymbols()
		} else {
			syms, err = img.f.Symbols()
		}
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("reading %s: %w", s.Name, err)
		}
		return syms, nil
	}
	return nil, nil
}

// readRelocs reads the RELA sections of dynamic relocations.
func (img *Image) readRelocs(dynsyms []elf.Symbol) error {
	for _, s := range img.f.Sections {
		if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		if s.Size > maxRelaBytes {
			return fmt.Errorf("reading %s: %d bytes, more than %d", s.Name, s.Size, maxRelaBytes)
		}
		data, err := s.Data()
		if err != nil {
			return fmt.Errorf("reading %s: %w", s.Name, err)
		}
		for len(data) >= 24 {
			off := binary.LittleEndian.Uint64(data)
			info := binary.LittleEndian.Uint64(data[8:])
			addend := int64(binary.LittleEndian.Uint64(data[16:]))
			data = data[24:]
			typ, sym := elf.R_X86_64(info&0xffffffff), info>>32
			var symbol *elf.Symbol
			if sym > 0 && sym <= uint64(len(dynsyms)) {
				symbol = &dynsyms[sym-1]
			}
			switch typ {
			case elf.R_X86_64_RELATIVE:
				img.relocs = append(img.relocs, reloc{off, uint64(addend)})
			case elf.R_X86_64_64, elf.R_X86_64_GLOB_DAT:
				if symbol != nil && symbol.Section != elf.SHN_UNDEF {
					img.relocs = append(img.relocs, reloc{off, symbol.Value + uint64(addend)})
				}
			case elf.R_X86_64_JMP_SLOT:
				if symbol != nil {
					img.slots[off] = symbol.Name
				}
			case elf.R_X86_64_DTPMOD64:
				img.tlsMods[off] = true
			case elf.R_X86_64_TPOFF64:
				img.tpoffs[off] = true
			}
		}
	}
	slices.SortFunc(img.relocs, func(a, b reloc) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	return nil
}

// File is the parsed ELF file.
func (img *Image) File() *elf.File { return img.f }

// Symbol returns the symbol named name, from .symtab or .dynsym.
func (img *Image) Symbol(name string) (Symbol, bool) {
	s, ok := img.syms[name]
	return s, ok
}

// SymbolAt names the function or object that starts at addr.
func (img *Image) SymbolAt(addr uint64) (string, bool) {
	for name, s := range img.syms {
		if s.Value == addr {
			return name, true
		}
	}
	return "", false
}

// Callee names the function a call to addr reaches: through a PLT stub,
// or defined at addr.
func (img *Image) Callee(addr uint64) (string, bool) {
	if name, ok := img.PLTTarget(addr); ok {
		return name, true
	}
	return img.SymbolAt(addr)
}

// Read reads len(buf) bytes at virtual address addr, as loaded: bytes of
// a segment beyond its file contents read as zeroes.
func (img *Image) Read(addr uint64, buf []byte) error {
	if len(buf) > MaxRead {
		return fmt.Errorf("reading %d bytes at %#x: more than %d", len(buf), addr, MaxRead)
	}
	for _, p := range img.loads {
		if addr < p.Vaddr || addr+uint64(len(buf)) > p.Vaddr+p.Memsz || addr+uint64(len(buf)) < addr {
			continue
		}
		clear(buf)
		off := addr - p.Vaddr
		if off >= p.Filesz {
			return nil
		}
		n := min(uint64(len(buf)), p.Filesz-off)
		if _, err := img.r.ReadAt(buf[:n], int64(p.Off+off)); err != nil {
			return fmt.Errorf("reading %d bytes at %#x: %w", len(buf), addr, err)
		}
		return nil
	}
	return fmt.Errorf("reading %d bytes at %#x: not in a loaded segment", len(buf), addr)
}

// Uint64 reads the 8 bytes at addr.
func (img *Image) Uint64(addr uint64) (uint64, error) {
	var b [8]byte
	if err := img.Read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Uint32 reads the 4 bytes at addr.
func (img *Image) Uint32(addr uint64) (uint32, error) {
	var b [4]byte
	if err := img.Read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// Pointer reads the pointer at addr as the loader leaves it: the value
// its relocation sets, else the file's bytes (a position-dependent file,
// or packed relative relocations, which keep the value in place). The
// result is a virtual address of the file.
func (img *Image) Pointer(addr uint64) (uint64, error) {
	if v, ok := img.Relocated(addr); ok {
		return v, nil
	}
	return img.Uint64(addr)
}

// Relocated returns the value a dynamic relocation writes at addr, for a
// slot relocated against this file's own addresses.
func (img *Image) Relocated(addr uint64) (uint64, bool) {
	i, found := slices.BinarySearchFunc(img.relocs, addr, func(r reloc, a uint64) int {
		switch {
		case r.addr < a:
			return -1
		case r.addr > a:
			return 1
		}
		return 0
	})
	if !found {
		return 0, false
	}
	return img.relocs[i].value, true
}

// TLSModuleSlot reports whether addr is a GOT slot the loader fills with
// a TLS module id (R_X86_64_DTPMOD64).
func (img *Image) TLSModuleSlot(addr uint64) bool { return img.tlsMods[addr] }

// TPOffsetSlot reports whether addr is a GOT slot the loader fills with a
// thread pointer offset (R_X86_64_TPOFF64).
func (img *Image) TPOffsetSlot(addr uint64) bool { return img.tpoffs[addr] }

// CString reads the NUL-terminated string at addr, at most max bytes.
func (img *Image) CString(addr uint64, max int) (string, error) {
	buf := make([]byte, 0, 64)
	var chunk [64]byte
	for len(buf) < max {
		n := min(len(chunk), max-len(buf))
		if err := img.Read(addr+uint64(len(buf)), chunk[:n]); err != nil {
			// A string near a segment's end: read what is left
			// byte by byte.
			if err := img.Read(addr+uint64(len(buf)), chunk[:1]); err != nil {
				return "", err
			}
			n = 1
		}
		for i := range n {
			if chunk[i] == 0 {
				return string(append(buf, chunk[:i]...)), nil
			}
		}
		buf = append(buf, chunk[:n]...)
	}
	return "", fmt.Errorf("reading string at %#x: longer than %d bytes", addr, max)
}

// Code returns the machine code of the function named name: at most max
// bytes of it.
func (img *Image) Code(name string, max int) (Symbol, []byte, error) {
	s, ok := img.Symbol(name)
	if !ok {
		return Symbol{}, nil, fmt.Errorf("no symbol %s", name)
	}
	n := s.Size
	if n == 0 || n > uint64(max) {
		n = uint64(max)
	}
	code := make([]byte, n)
	if err := img.Read(s.Value, code); err != nil {
		return Symbol{}, nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return s, code, nil
}

// PLTTarget names the function a PLT stub at addr jumps to: the symbol of
// the JUMP_SLOT relocation of the GOT slot its indirect jump reads.
func (img *Image) PLTTarget(addr uint64) (string, bool) {
	var code [32]byte
	if err := img.Read(addr, code[:]); err != nil {
		return "", false
	}
	pc := addr
	for i := 0; i < 3 && pc-addr < uint64(len(code)); i++ {
		inst, err := x86sym.Decode(code[pc-addr:])
		if err != nil {
			return "", false
		}
		next := pc + uint64(inst.Len)
		switch inst.Op {
		case x86asm.NOP:
			pc = next
			continue
		case x86asm.JMP:
			mem, ok := inst.Args[0].(x86asm.Mem)
			if !ok || mem.Base != x86asm.RIP || mem.Index != 0 {
				return "", false
			}
			name, ok := img.slots[uint64(int64(next)+mem.Disp)]
			return name, ok
		}
		return "", false
	}
	return "", false
}

// Dependencies are the DT_NEEDED libraries.
func (img *Image) Dependencies() ([]string, error) {
	libs, err := img.f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("reading DT_NEEDED: %w", err)
	}
	return libs, nil
}

// Addresses returns the mapper between the file's offsets and its ELF
// virtual addresses: a mapping's load bias, or where code lies in the file.
func (img *Image) Addresses() *elfbin.AddressMapper { return elfbin.NewAddressMapper(img.f.Progs) }

// TLS returns the PT_TLS segment's virtual address, memory size and
// alignment, if the file has thread-locals.
func (img *Image) TLS() (addr, size, align uint64, ok bool) {
	for _, p := range img.f.Progs {
		if p.Type == elf.PT_TLS {
			return p.Vaddr, p.Memsz, p.Align, true
		}
	}
	return 0, 0, 0, false
}
