package elfbin

import (
	"bytes"
	"debug/elf"
	"io"
	"os"
	"strconv"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// compressedSections opens path and returns it with its SHF_COMPRESSED
// sections and their bytes in the file; the test fails if it has none.
func compressedSections(t *testing.T, path string) (*elf.File, []*elf.Section, [][]byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var (
		sects []*elf.Section
		raws  [][]byte
	)
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_COMPRESSED != 0 {
			sects = append(sects, s)
			raws = append(raws, data[s.Offset:s.Offset+s.FileSize])
		}
	}
	if len(sects) == 0 {
		t.Fatalf("%s: no compressed sections", path)
	}
	return f, sects, raws
}

// TestSectionInflateMatchesDebugELF checks that the zlib sections of a C
// binary (-gz=zlib) and of a Go binary (the Go linker compresses its
// DWARF) decompress, in the heap and as a stream, to exactly what
// debug/elf decompresses them to.
func TestSectionInflateMatchesDebugELF(t *testing.T) {
	cBin := testworkload.BuildC(t, "cpuhog.c", "-O2", "-g", "-gz=zlib", "-fno-omit-frame-pointer")
	goBin := testworkload.BuildGo(t, "gohog")
	for _, path := range []string{cBin, goBin} {
		f, sects, raws := compressedSections(t, path)
		for i, s := range sects {
			if typ, _, err := CompressionHeader(f, raws[i]); err != nil || typ != elf.COMPRESS_ZLIB {
				t.Fatalf("%s %s: compression %v, %v; want zlib", path, s.Name, typ, err)
			}
			want, err := s.Data()
			if err != nil {
				t.Fatalf("%s %s: debug/elf: %v", path, s.Name, err)
			}
			got, err := SectionData(f, s, raws[i])
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s %s: SectionData gave %d bytes (%v), debug/elf %d; equal: %v", path, s.Name, len(got), err, len(want), bytes.Equal(got, want))
			}
			streamed, err := io.ReadAll(SectionReader(f, s, raws[i]))
			if err != nil || !bytes.Equal(streamed, want) {
				t.Fatalf("%s %s: SectionReader gave %d bytes (%v), debug/elf %d", path, s.Name, len(streamed), err, len(want))
			}
		}
	}
}

// TestSectionInflateCorrupt checks that a compressed section cut short or
// with a byte changed is an error, never a panic nor bytes that pass for
// the section's.
func TestSectionInflateCorrupt(t *testing.T) {
	cBin := testworkload.BuildC(t, "cpuhog.c", "-O2", "-g", "-gz=zlib", "-fno-omit-frame-pointer")
	f, sects, raws := compressedSections(t, cBin)
	var s *elf.Section
	var raw []byte
	for i := range sects {
		if sects[i].Name == ".debug_info" {
			s, raw = sects[i], raws[i]
		}
	}
	if s == nil || len(raw) < 64 {
		t.Fatalf("%s: no compressed .debug_info of some size", cBin)
	}
	want, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, bad []byte) {
		t.Helper()
		got, err := SectionData(f, s, bad)
		if err == nil {
			t.Errorf("%s: SectionData gave %d bytes and no error (equal to the section's: %v)", what, len(got), bytes.Equal(got, want))
		}
		streamed, err := io.ReadAll(io.LimitReader(SectionReader(f, s, bad), int64(s.Size)+1))
		if err == nil && bytes.Equal(streamed, want) {
			t.Errorf("%s: the stream gave the section's bytes and no error", what)
		}
		if err == nil && len(streamed) == len(want) {
			t.Errorf("%s: the stream gave the section's size and no error", what)
		}
	}
	for _, n := range []int{0, 1, 12, 23, 24, 25, len(raw) / 2, len(raw) - 4, len(raw) - 1} {
		check("cut to "+strconv.Itoa(n)+" bytes", raw[:n:n])
	}
	for _, at := range []int{26, len(raw) / 3, len(raw) / 2, len(raw) - 2} {
		bad := bytes.Clone(raw)
		bad[at] ^= 0x55
		check("byte "+strconv.Itoa(at)+" changed", bad)
	}
}
