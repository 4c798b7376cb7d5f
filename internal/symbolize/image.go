package symbolize

import (
	"debug/elf"
	"strings"

	"github.com/bpfcol/bpfcol/internal/elfbin"
)

// elfImage is an ELF file's headers and, when it could be mapped, its
// content: sections are then read in place instead of copied to the heap.
type elfImage struct {
	f    *elf.File
	data []byte // the mapped file; nil when not mapped
	// spilled holds the compressed sections decompressed to disk and
	// mapped (see sectionSpill); nil decompresses into the heap.
	spilled *spilledSections
}

// section returns the content of s: a slice of the mapping when s is stored
// uncompressed in the file, a mapping of it decompressed to disk when the
// process spills sections, else a heap copy (decompressed). heap says
// whether it is on the heap.
func (img elfImage) section(s *elf.Section) (data []byte, heap bool, err error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, false, nil
	}
	compressed := s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug")
	if img.data != nil && !compressed && s.Offset <= uint64(len(img.data)) && s.FileSize <= uint64(len(img.data))-s.Offset {
		return img.data[s.Offset : s.Offset+s.FileSize : s.Offset+s.FileSize], false, nil
	}
	var raw []byte
	if compressed {
		// A section that cannot be spilled (no room, a write error)
		// is decompressed into the heap instead.
		if img.data != nil && s.Offset <= uint64(len(img.data)) && s.FileSize <= uint64(len(img.data))-s.Offset {
			raw = img.data[s.Offset : s.Offset+s.FileSize]
		}
		if d, ok, _ := img.spilled.get(img.f, s, raw); ok {
			return d, false, nil
		}
	}
	b, err := elfbin.SectionData(img.f, s, raw)
	return b, true, err
}

// symbolValue returns the value of the defined symbol called name in
// .symtab, read in place.
func (img elfImage) symbolValue(name string) (uint64, bool) {
	r, strtab, ok := img.symbols(elf.SHT_SYMTAB)
	if !ok {
		return 0, false
	}
	for i := 1; i < r.count(); i++ {
		s := r.at(i)
		if elf.SectionIndex(s.shndx) != elf.SHN_UNDEF && string(cstring(strtab, s.name)) == name {
			return s.value, true
		}
	}
	return 0, false
}

// symbols returns a reader of the first section of type typ (SHT_SYMTAB or
// SHT_DYNSYM) and its string table.
func (img elfImage) symbols(typ elf.SectionType) (symbolReader, []byte, bool) {
	for _, s := range img.f.Sections {
		if s.Type != typ {
			continue
		}
		if s.Link == 0 || int(s.Link) >= len(img.f.Sections) {
			return symbolReader{}, nil, false
		}
		data, _, err := img.section(s)
		if err != nil {
			return symbolReader{}, nil, false
		}
		strtab, _, err := img.section(img.f.Sections[s.Link])
		if err != nil {
			return symbolReader{}, nil, false
		}
		r := symbolReader{data: data, order: img.f.ByteOrder, is64: img.f.Class == elf.ELFCLASS64}
		r.data = r.data[:len(r.data)/r.entSize()*r.entSize()]
		return r, strtab, true
	}
	return symbolReader{}, nil, false
}
