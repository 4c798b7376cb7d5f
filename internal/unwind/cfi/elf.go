package cfi

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/bpfcol/bpfcol/internal/elfbin"
)

// ErrNoCFI is returned when a file has no CFI section of the kind asked
// for.
var ErrNoCFI = errors.New("no CFI")

// minCoverage is the share of executable bytes that .eh_frame must cover
// for .debug_frame not to be looked for. Complete .eh_frame leaves out a
// few hand-written stubs only (libc: >99%).
const minCoverage = 0.9

// FromELF compiles f's .eh_frame, filled where it has no FDE with the
// .debug_frame of f itself when .eh_frame covers less than 90% of the
// executable code. It returns ErrNoCFI when f has neither.
func FromELF(f *elf.File) (*Table, error) {
	// A .eh_frame that fails to parse is no reason not to try
	// .debug_frame; its error is returned if that fails too.
	t, err := EHFrame(f)
	if t != nil && !NeedsDebugFrame(f, t) {
		return t, nil
	}
	d, derr := DebugFrame(f)
	switch {
	case derr == nil && t == nil:
		return d, nil
	case derr == nil:
		return t.Fill(d), nil
	case t != nil:
		return t, nil
	case errors.Is(derr, ErrNoCFI):
		return nil, err
	case errors.Is(err, ErrNoCFI):
		return nil, derr
	}
	return nil, err
}

// NeedsDebugFrame tells whether t, compiled from f's .eh_frame, covers so
// little of f's executable code that .debug_frame (from f or its separate
// debug file) should fill it.
func NeedsDebugFrame(f *elf.File, t *Table) bool {
	ranges := ExecRanges(f)
	var total uint64
	for _, r := range ranges {
		total += r.End - r.Start
	}
	return total > 0 && float64(t.Covered(ranges)) < minCoverage*float64(total)
}

// EHFrame compiles f's .eh_frame. Without section headers, .eh_frame is
// found through the PT_GNU_EH_FRAME segment (.eh_frame_hdr).
func EHFrame(f *elf.File) (*Table, error) {
	a, err := archOf(f)
	if err != nil {
		return nil, err
	}
	data, b, err := ehFrameData(f)
	if err != nil {
		return nil, err
	}
	return compileSection(f, a, data, ehFrame, b, ".eh_frame")
}

// FDERanges returns, for each of pcs, the address range of the .eh_frame
// FDE that covers it: a function, or a part of one that the compiler
// moved away (its .cold code). A pc no FDE covers gets the zero Range.
func FDERanges(f *elf.File, pcs []uint64) ([]Range, error) {
	data, b, err := ehFrameData(f)
	if err != nil {
		return nil, err
	}
	var st parseStats
	fdes, err := parseSection(data, ehFrame, b, &st)
	if err != nil && len(fdes) == 0 {
		return nil, fmt.Errorf("parsing .eh_frame: %w", err)
	}
	out := make([]Range, len(pcs))
	for _, fd := range fdes {
		for i, pc := range pcs {
			if pc >= fd.begin && pc < fd.end {
				out[i] = Range{Start: fd.begin, End: fd.end}
			}
		}
	}
	return out, nil
}

// ehFrameData returns f's .eh_frame and the bases its pointers are read
// with.
func ehFrameData(f *elf.File) ([]byte, *bases, error) {
	if _, err := archOf(f); err != nil {
		return nil, nil, err
	}
	b := &bases{}
	if got := f.Section(".got"); got != nil {
		b.data, b.hasData = got.Addr, true
	}
	var data []byte
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		var err error
		if data, err = sectionData(f, s); err != nil {
			return nil, nil, fmt.Errorf("reading .eh_frame: %w", err)
		}
		b.section = s.Addr
	} else {
		addr, err := ehFrameFromHeader(f)
		if err != nil {
			return nil, nil, err
		}
		if data, err = segmentData(f, addr); err != nil {
			return nil, nil, fmt.Errorf("reading .eh_frame at %#x: %w", addr, err)
		}
		b.section = addr
	}
	return data, b, nil
}

// DebugFrame compiles f's .debug_frame (f may be a separate debug file:
// its addresses are those of the binary it describes).
func DebugFrame(f *elf.File) (*Table, error) {
	a, err := archOf(f)
	if err != nil {
		return nil, err
	}
	s := f.Section(".debug_frame")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("reading .debug_frame: %w", ErrNoCFI)
	}
	data, err := sectionData(f, s)
	if err != nil {
		return nil, fmt.Errorf("reading .debug_frame: %w", err)
	}
	return compileSection(f, a, data, debugFrame, &bases{}, ".debug_frame")
}

func compileSection(f *elf.File, a *arch, data []byte, kind sectionKind, b *bases, name string) (*Table, error) {
	var st parseStats
	fdes, err := parseSection(data, kind, b, &st)
	if err != nil && len(fdes) == 0 {
		return nil, fmt.Errorf("parsing %s: %w", name, err)
	}
	if len(fdes) == 0 {
		return nil, fmt.Errorf("parsing %s: %w", name, ErrNoCFI)
	}
	return &Table{Rows: compile(a, data, fdes, b, inRanges(ExecRanges(f)), &st)}, nil
}

// inRanges returns a keep function for compile that accepts a function
// lying wholly in one of ranges (or any function when ranges is empty).
func inRanges(ranges []Range) func(begin, end uint64) bool {
	return func(begin, end uint64) bool {
		if len(ranges) == 0 {
			return true
		}
		i, _ := slices.BinarySearchFunc(ranges, begin, func(r Range, a uint64) int {
			if r.End <= a {
				return -1
			}
			return 1
		})
		return i < len(ranges) && ranges[i].Start <= begin && end <= ranges[i].End
	}
}

// ExecRanges returns the virtual address ranges of f's executable code:
// its executable PT_LOAD segments, or its executable sections when it has
// no program headers.
func ExecRanges(f *elf.File) []Range {
	var rs []Range
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr+p.Memsz > p.Vaddr {
			rs = append(rs, Range{p.Vaddr, p.Vaddr + p.Memsz})
		}
	}
	if len(rs) == 0 {
		for _, s := range f.Sections {
			if s.Flags&elf.SHF_EXECINSTR != 0 && s.Flags&elf.SHF_ALLOC != 0 && s.Addr+s.Size > s.Addr {
				rs = append(rs, Range{s.Addr, s.Addr + s.Size})
			}
		}
	}
	slices.SortFunc(rs, func(a, b Range) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	// Merge overlaps so that the ranges are disjoint.
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && r.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// sectionData reads a section of f (decompressed), bounded.
func sectionData(f *elf.File, s *elf.Section) ([]byte, error) {
	if s.Size > maxSectionBytes {
		return nil, fmt.Errorf("section of %d bytes exceeds the %d byte bound", s.Size, maxSectionBytes)
	}
	return elfbin.SectionData(f, s, nil)
}

// ehFrameFromHeader returns the address of .eh_frame read from the
// PT_GNU_EH_FRAME segment (.eh_frame_hdr).
func ehFrameFromHeader(f *elf.File) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_GNU_EH_FRAME {
			continue
		}
		hdr := make([]byte, min(p.Filesz, 16))
		if _, err := p.ReadAt(hdr, 0); err != nil {
			return 0, fmt.Errorf("reading .eh_frame_hdr: %w", err)
		}
		r := &reader{b: hdr}
		if v := r.u8(); v != 1 {
			return 0, fmt.Errorf("reading .eh_frame_hdr: version %d not supported", v)
		}
		enc := r.u8()
		r.u8() // fde_count_enc
		r.u8() // table_enc
		addr, err := r.encoded(enc, &bases{section: p.Vaddr, data: p.Vaddr, hasData: true}, true)
		if err != nil {
			return 0, fmt.Errorf("reading .eh_frame_hdr: %w", err)
		}
		return addr, nil
	}
	return 0, fmt.Errorf("reading .eh_frame: %w", ErrNoCFI)
}

// segmentData returns the file-backed bytes of the PT_LOAD segment that
// holds addr, from addr to the segment's end, bounded.
func segmentData(f *elf.File, addr uint64) ([]byte, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr-p.Vaddr >= p.Filesz {
			continue
		}
		// Read in chunks: Filesz is not trusted to match the file.
		n := min(p.Filesz-(addr-p.Vaddr), maxSectionBytes)
		r := io.NewSectionReader(p, int64(addr-p.Vaddr), int64(n))
		data, err := io.ReadAll(io.LimitReader(r, int64(n)))
		if err != nil {
			return nil, err
		}
		if uint64(len(data)) < n {
			return nil, io.ErrUnexpectedEOF
		}
		return data, nil
	}
	return nil, errors.New("address in no loaded segment")
}
