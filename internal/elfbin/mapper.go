package elfbin

import (
	"debug/elf"
	"os"
)

// loadSegment is the raw geometry of one PT_LOAD segment.
type loadSegment struct {
	offset, vaddr, filesz, memsz uint64
	exec                         bool
}

// contains reports whether vaddr falls in the segment's file content.
func (s *loadSegment) contains(vaddr uint64) bool {
	return vaddr >= s.vaddr && vaddr-s.vaddr < s.filesz
}

// AddressMapper is the one place that converts between file offsets and ELF
// virtual addresses, through a binary's PT_LOAD segments, in both
// directions: a sampled PC's file offset (addr - start + pgoff from
// /proc/PID/maps) to the address symbol tables use, and a function's
// address back to the file offset uprobes attach at or code is read from.
//
// It keeps the raw p_offset, p_vaddr and p_filesz of the segments and
// page-aligns at lookup: the kernel maps a segment from p_offset rounded
// down to a page, so a mapping's pgoff can be below a segment's unaligned
// p_offset while still belonging to it.
type AddressMapper struct {
	segments []loadSegment
	pageMask uint64
}

// NewAddressMapper keeps the PT_LOAD segments of progs.
func NewAddressMapper(progs []*elf.Prog) *AddressMapper {
	m := &AddressMapper{pageMask: uint64(os.Getpagesize()) - 1}
	for _, p := range progs {
		if p == nil || p.Type != elf.PT_LOAD {
			continue
		}
		m.segments = append(m.segments, loadSegment{offset: p.Off, vaddr: p.Vaddr, filesz: p.Filesz, memsz: p.Memsz, exec: p.Flags&elf.PF_X != 0})
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
		if s.exec && fileOffset >= s.offset && fileOffset-s.offset < s.filesz {
			return s.vaddr + (fileOffset - s.offset), true
		}
	}
	for _, s := range m.segments {
		aligned := s.offset &^ m.pageMask
		if s.exec && fileOffset >= aligned && fileOffset < s.offset+s.filesz {
			// p_vaddr and p_offset are congruent modulo the page size, so
			// subtracting before adding keeps the bytes of the leading partial
			// page at their own addresses.
			return s.vaddr - (s.offset - fileOffset), true
		}
	}
	return 0, false
}

// VirtualAddressToFileOffset returns the file offset of the byte at the
// ELF virtual address vaddr in an executable segment, and how many bytes of
// file content the segment holds from there on. ok is false when no
// executable segment holds vaddr.
func (m *AddressMapper) VirtualAddressToFileOffset(vaddr uint64) (off, avail uint64, ok bool) {
	return m.toFileOffset(vaddr, true)
}

// DataAddressToFileOffset returns the file offset of the byte at the ELF
// virtual address vaddr in any PT_LOAD segment, executable or not (file
// backed data such as a USDT semaphore).
func (m *AddressMapper) DataAddressToFileOffset(vaddr uint64) (uint64, bool) {
	off, _, ok := m.toFileOffset(vaddr, false)
	return off, ok
}

func (m *AddressMapper) toFileOffset(vaddr uint64, execOnly bool) (off, avail uint64, ok bool) {
	if m == nil {
		return 0, 0, false
	}
	for _, s := range m.segments {
		if (s.exec || !execOnly) && s.contains(vaddr) {
			delta := vaddr - s.vaddr
			return s.offset + delta, s.filesz - delta, true
		}
	}
	return 0, 0, false
}

// LoadBias returns the difference between runtime and ELF virtual
// addresses in a mapping at start of the file from offset off (as
// /proc/PID/maps shows it), or false when no executable segment maps off.
func (m *AddressMapper) LoadBias(start, off uint64) (uint64, bool) {
	vaddr, ok := m.FileOffsetToVirtualAddress(off)
	if !ok {
		return 0, false
	}
	return start - vaddr, true
}

// HasExec reports whether the binary has an executable segment.
func (m *AddressMapper) HasExec() bool {
	for _, s := range m.segments {
		if s.exec {
			return true
		}
	}
	return false
}

// ExecDelta returns the one difference between ELF virtual addresses and
// file offsets of every executable segment, when they share one (as
// linkers lay them out but for a few).
func (m *AddressMapper) ExecDelta() (delta uint64, ok bool) {
	for _, s := range m.segments {
		if !s.exec {
			continue
		}
		if d := s.vaddr - s.offset; !ok {
			delta, ok = d, true
		} else if d != delta {
			return 0, false
		}
	}
	return delta, ok
}

// CodeOffset returns the file offset that the code address vaddr, in an
// executable segment's memory image or at its end (where a CFI row ends
// the segment's last function), is at.
func (m *AddressMapper) CodeOffset(vaddr uint64) (uint64, bool) {
	for _, s := range m.segments {
		if s.exec && vaddr >= s.vaddr && vaddr-s.vaddr <= s.memsz {
			return vaddr - (s.vaddr - s.offset), true
		}
	}
	return 0, false
}
