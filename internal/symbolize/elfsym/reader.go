package elfsym

import (
	"bytes"
	"debug/elf"
	"encoding/binary"

	"github.com/bpfcol/bpfcol/internal/symbolize/sections"
)

// rawSym is one symbol table entry, read in place.
type rawSym struct {
	name        uint32
	info        byte
	shndx       uint16
	value, size uint64
}

// Reader walks a .symtab or .dynsym section without copying it.
type Reader struct {
	data  []byte
	order binary.ByteOrder
	is64  bool
}

func (r Reader) entSize() int {
	if r.is64 {
		return 24
	}
	return 16
}

// Count returns the number of entries, the null symbol first.
func (r Reader) Count() int { return len(r.data) / r.entSize() }

func (r Reader) at(i int) rawSym {
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

// CString returns the NUL-terminated string at off of tab, nil when off is
// outside it.
func CString(tab []byte, off uint32) []byte {
	if off == noName || uint64(off) >= uint64(len(tab)) {
		return nil
	}
	s := tab[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// Symbols returns a reader of img's first section of type typ
// (SHT_SYMTAB or SHT_DYNSYM), read in place, and its string table.
func Symbols(img sections.Image, typ elf.SectionType) (Reader, []byte, bool) {
	for _, s := range img.F.Sections {
		if s.Type != typ {
			continue
		}
		if s.Link == 0 || int(s.Link) >= len(img.F.Sections) {
			return Reader{}, nil, false
		}
		data, _, err := img.Section(s)
		if err != nil {
			return Reader{}, nil, false
		}
		strtab, _, err := img.Section(img.F.Sections[s.Link])
		if err != nil {
			return Reader{}, nil, false
		}
		r := Reader{data: data, order: img.F.ByteOrder, is64: img.F.Class == elf.ELFCLASS64}
		r.data = r.data[:len(r.data)/r.entSize()*r.entSize()]
		return r, strtab, true
	}
	return Reader{}, nil, false
}

// Value returns the value of the defined symbol called name in img's
// .symtab, read in place.
func Value(img sections.Image, name string) (uint64, bool) {
	r, strtab, ok := Symbols(img, elf.SHT_SYMTAB)
	if !ok {
		return 0, false
	}
	for i := 1; i < r.Count(); i++ {
		s := r.at(i)
		if elf.SectionIndex(s.shndx) != elf.SHN_UNDEF && string(CString(strtab, s.name)) == name {
			return s.value, true
		}
	}
	return 0, false
}
