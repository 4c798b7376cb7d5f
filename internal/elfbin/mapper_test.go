package elfbin

import (
	"debug/elf"
	"os"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestAddressMapperUnaligned checks a layout as lld emits it: the
// executable segment's p_offset is not page-aligned, so the kernel maps it
// from the page below and /proc/PID/maps shows that page as pgoff.
func TestAddressMapperUnaligned(t *testing.T) {
	testenv.RequirePlatform(t, os.Getpagesize() == 4096, "4 KiB pages")
	progs := []*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_PHDR, Flags: elf.PF_R | elf.PF_X, Off: 0x40, Vaddr: 0x200040, Filesz: 0x100}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R, Off: 0, Vaddr: 0x200000, Filesz: 0x1234}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x1234, Vaddr: 0x201234, Filesz: 0x2000}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_W, Off: 0x3234, Vaddr: 0x204234, Filesz: 0x100}},
	}
	m := NewAddressMapper(progs)
	// The text mapping starts at pgoff 0x1000 (0x1234 rounded down). A PC in
	// it at mapping offset d has file offset 0x1000+d, and file offset o in
	// the segment sits at p_vaddr + (o - p_offset).
	cases := []struct {
		off   uint64
		vaddr uint64
		ok    bool
	}{
		{0x1234, 0x201234, true},         // segment start
		{0x1240, 0x201240, true},         // inside
		{0x3233, 0x203233, true},         // last byte with file content
		{0x1000, 0x201000, true},         // leading partial page of the mapping
		{0x1233, 0x201233, true},         // last byte before p_offset
		{0x0fff, 0, false},               // below the mapping's first page
		{0x3234, 0, false},               // past p_offset+p_filesz (data segment)
		{0x10, 0, false},                 // only in the non-executable first segment
		{0x40, 0, false},                 // PT_PHDR is not a PT_LOAD
		{^uint64(0), 0, false},           // nonsense
		{0x2000 + 0x234, 0x202234, true}, // a whole page in
	}
	for _, c := range cases {
		got, ok := m.FileOffsetToVirtualAddress(c.off)
		if ok != c.ok || got != c.vaddr {
			t.Errorf("FileOffsetToVirtualAddress(%#x) = %#x, %v; want %#x, %v", c.off, got, ok, c.vaddr, c.ok)
		}
	}
}

// TestAddressMapperSeveralSegments covers two executable segments whose
// page-aligned starts overlap the previous one's bytes: exact containment
// must win over the slack below an unaligned p_offset.
func TestAddressMapperSeveralSegments(t *testing.T) {
	testenv.RequirePlatform(t, os.Getpagesize() == 4096, "4 KiB pages")
	progs := []*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x0, Vaddr: 0x400000, Filesz: 0x1800}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x1800, Vaddr: 0x601800, Filesz: 0x800}},
	}
	m := NewAddressMapper(progs)
	cases := []struct {
		off, vaddr uint64
	}{
		{0x17ff, 0x4017ff}, // first segment's last byte, inside the second's aligned page
		{0x1800, 0x601800}, // second segment's first byte
		{0x1fff, 0x601fff},
		{0x0, 0x400000},
	}
	for _, c := range cases {
		got, ok := m.FileOffsetToVirtualAddress(c.off)
		if !ok || got != c.vaddr {
			t.Errorf("FileOffsetToVirtualAddress(%#x) = %#x, %v; want %#x", c.off, got, ok, c.vaddr)
		}
	}
	if _, ok := m.FileOffsetToVirtualAddress(0x2000); ok {
		t.Error("FileOffsetToVirtualAddress(0x2000) past both segments succeeded")
	}
	var nilMapper *AddressMapper
	if _, ok := nilMapper.FileOffsetToVirtualAddress(0); ok {
		t.Error("nil mapper resolved an offset")
	}
}

// TestAddressMapperBothDirections converts addresses to file offsets and
// back through the same segments, and keeps data segments out of code.
func TestAddressMapperBothDirections(t *testing.T) {
	progs := []*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R, Off: 0, Vaddr: 0x200000, Filesz: 0x1234}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x1234, Vaddr: 0x201234, Filesz: 0x2000}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_W, Off: 0x3234, Vaddr: 0x204234, Filesz: 0x100, Memsz: 0x800}},
	}
	m := NewAddressMapper(progs)
	for _, vaddr := range []uint64{0x201234, 0x201240, 0x203233} {
		off, avail, ok := m.VirtualAddressToFileOffset(vaddr)
		if !ok || avail != 0x203234-vaddr {
			t.Fatalf("VirtualAddressToFileOffset(%#x) = %#x, %#x, %v", vaddr, off, avail, ok)
		}
		if back, ok := m.FileOffsetToVirtualAddress(off); !ok || back != vaddr {
			t.Errorf("%#x -> offset %#x -> %#x, %v", vaddr, off, back, ok)
		}
		if data, ok := m.DataAddressToFileOffset(vaddr); !ok || data != off {
			t.Errorf("DataAddressToFileOffset(%#x) = %#x, %v; want %#x", vaddr, data, ok, off)
		}
	}
	for _, vaddr := range []uint64{0x200010, 0x204240, 0x203234, 0x204334, 0x100000} {
		if off, _, ok := m.VirtualAddressToFileOffset(vaddr); ok {
			t.Errorf("VirtualAddressToFileOffset(%#x) = %#x outside executable file content", vaddr, off)
		}
	}
	if off, ok := m.DataAddressToFileOffset(0x204240); !ok || off != 0x3240 {
		t.Errorf("DataAddressToFileOffset(data) = %#x, %v; want 0x3240", off, ok)
	}
	if off, ok := m.DataAddressToFileOffset(0x200010); !ok || off != 0x10 {
		t.Errorf("DataAddressToFileOffset(rodata) = %#x, %v; want 0x10", off, ok)
	}
	// Bytes past p_filesz (.bss) have no file content.
	if _, ok := m.DataAddressToFileOffset(0x204400); ok {
		t.Error("DataAddressToFileOffset resolved .bss")
	}
	var nilMapper *AddressMapper
	if _, _, ok := nilMapper.VirtualAddressToFileOffset(0x201234); ok {
		t.Error("nil mapper resolved an address")
	}
}
