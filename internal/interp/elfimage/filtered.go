package elfimage

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/bpfcol/bpfcol/internal/elfbin"
)

// maxStrtabBytes bounds a string table read with a symbol table (node's
// .strtab is about 7.5 MiB).
const maxStrtabBytes = 64 << 20

// OpenSymbols reads r's headers and, of its symbol tables, only the
// symbols whose names match: a large binary of which a few symbols matter
// (node: 250k symbols, 13 MiB of names) costs no string or map entry per
// symbol. Its Image has no relocations (Pointer reads the file's bytes).
func OpenSymbols(r io.ReaderAt, match func(name []byte) bool) (img *Image, err error) {
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
	// .symtab first: a global symbol of .dynsym wins over a local one.
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		if err := img.scanSymbols(typ, match); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// scanSymbols adds the matching symbols of the symbol table of type typ.
func (img *Image) scanSymbols(typ elf.SectionType, match func(name []byte) bool) error {
	for _, s := range img.f.Sections {
		if s.Type != typ {
			continue
		}
		if s.Size > maxSymtabBytes {
			return fmt.Errorf("reading %s: %d bytes, more than %d", s.Name, s.Size, maxSymtabBytes)
		}
		if int(s.Link) >= len(img.f.Sections) {
			return fmt.Errorf("reading %s: string table %d not a section", s.Name, s.Link)
		}
		strs := img.f.Sections[s.Link]
		if strs.Size > maxStrtabBytes {
			return fmt.Errorf("reading %s: %d bytes, more than %d", strs.Name, strs.Size, maxStrtabBytes)
		}
		syms, err := s.Data()
		if err != nil {
			return fmt.Errorf("reading %s: %w", s.Name, err)
		}
		names, err := strs.Data()
		if err != nil {
			return fmt.Errorf("reading %s: %w", strs.Name, err)
		}
		const entry = 24 // Elf64_Sym
		for off := entry; off+entry <= len(syms); off += entry {
			e := syms[off : off+entry]
			name := cstring(names, binary.LittleEndian.Uint32(e))
			shndx := elf.SectionIndex(binary.LittleEndian.Uint16(e[6:]))
			if len(name) == 0 || shndx == elf.SHN_UNDEF || !match(name) {
				continue
			}
			bind := elf.ST_BIND(e[4])
			if _, ok := img.syms[string(name)]; ok && bind != elf.STB_GLOBAL {
				continue
			}
			img.syms[string(name)] = Symbol{Value: binary.LittleEndian.Uint64(e[8:]), Size: binary.LittleEndian.Uint64(e[16:])}
		}
		return nil
	}
	return nil
}

// cstring returns the NUL-terminated name at off in a string table, empty
// when off is outside it.
func cstring(tab []byte, off uint32) []byte {
	if int64(off) >= int64(len(tab)) {
		return nil
	}
	s := tab[off:]
	for i, c := range s {
		if c == 0 {
			return s[:i]
		}
	}
	return s
}
