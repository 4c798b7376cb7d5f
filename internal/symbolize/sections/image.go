// Package sections reads the sections of an ELF file the symbolizer's
// tables are built from: in place from the file's mapping when stored
// plain, else decompressed, to disk where the symbolizer spills them (its
// Inflater), or into the heap.
package sections

import (
	"debug/elf"
	"strings"

	"github.com/bpfcol/bpfcol/internal/elfbin"
)

// Inflater hands out a compressed section decompressed outside the heap
// (spilled to disk and mapped); ok is false when it cannot.
type Inflater interface {
	Inflated(f *elf.File, s *elf.Section, raw []byte) (data []byte, ok bool)
}

// Image is an ELF file's headers and, when it could be mapped, its
// content: sections are then read in place instead of copied to the heap.
type Image struct {
	F    *elf.File
	Data []byte // the mapped file; nil when not mapped
	// Inflater decompresses sections outside the heap; nil decompresses
	// into the heap.
	Inflater Inflater
}

// Raw returns s's bytes in the mapped file, nil when not at hand.
func (img Image) Raw(s *elf.Section) []byte {
	if img.Data != nil && s.Offset <= uint64(len(img.Data)) && s.FileSize <= uint64(len(img.Data))-s.Offset {
		return img.Data[s.Offset : s.Offset+s.FileSize : s.Offset+s.FileSize]
	}
	return nil
}

// Compressed reports whether s is stored compressed (SHF_COMPRESSED or a
// .zdebug section).
func Compressed(s *elf.Section) bool {
	return s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug")
}

// Section returns the content of s: a slice of the mapping when s is
// stored uncompressed in the file, a mapping of it decompressed to disk
// when the Inflater can, else a heap copy (decompressed). heap says
// whether it is on the heap.
func (img Image) Section(s *elf.Section) (data []byte, heap bool, err error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, false, nil
	}
	raw := img.Raw(s)
	if !Compressed(s) && raw != nil {
		return raw, false, nil
	}
	if Compressed(s) && img.Inflater != nil {
		// A section that cannot be spilled (no room, a write error)
		// is decompressed into the heap instead.
		if d, ok := img.Inflater.Inflated(img.F, s, raw); ok {
			return d, false, nil
		}
	}
	b, err := elfbin.SectionData(img.F, s, raw)
	return b, true, err
}
