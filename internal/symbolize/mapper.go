package symbolize

import (
	"debug/elf"
	"os"
)

// loadSegment is the raw geometry of one executable PT_LOAD segment.
type loadSegment struct {
	offset, vaddr, filesz uint64
}

// AddressMapper maps a file offset inside a mapping (addr - start + pgoff
// from /proc/PID/maps) to the ELF virtual address of the same byte.
//
// It keeps the raw p_offset, p_vaddr and p_filesz of the executable PT_LOAD
// segments and page-aligns at lookup: the kernel maps a segment from
// p_offset rounded down to a page, so a mapping's pgoff can be below a
// segment's unaligned p_offset while still belonging to it.
type AddressMapper struct {
	segments []loadSegment
	pageMask uint64
}

// NewAddressMapper keeps the executable PT_LOAD segments of progs.
func NewAddressMapper(progs []*elf.Prog) *AddressMapper {
	m := &AddressMapper{pageMask: uint64(os.Getpagesize()) - 1}
	for _, p := range progs {
		if p == nil || p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		m.segments = append(m.segments, loadSegment{offset: p.Off, vaddr: p.Vaddr, filesz: p.Filesz})
	}
	return m
}

// FileOffsetToVirtualAddress returns the ELF virtual address of the byte at
// fileOffset, or false when no executable segment maps it.
func (m *AddressMapper) FileOffsetToVirtualAddress(fileOffset uint64) (uint64, bool) {
	if m == nil {
		return 0, false
	}
	// Exact containment first: with unaligned offsets the page-aligned start
	// of one segment can reach back into the bytes of another.
	for _, s := range m.segments {
		if fileOffset >= s.offset && fileOffset-s.offset < s.filesz {
			return s.vaddr + (fileOffset - s.offset), true
		}
	}
	for _, s := range m.segments {
		aligned := s.offset &^ m.pageMask
		if fileOffset >= aligned && fileOffset < s.offset+s.filesz {
			// p_vaddr and p_offset are congruent modulo the page size, so
			// subtracting before adding keeps the bytes of the leading partial
			// page at their own addresses.
			return s.vaddr - (s.offset - fileOffset), true
		}
	}
	return 0, false
}
