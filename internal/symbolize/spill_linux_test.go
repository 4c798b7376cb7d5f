package symbolize

import (
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/bpfcol/bpfcol/internal/safefs"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// useSpill points the process's section spill at a new private directory
// bounded by maxBytes (nil: none) until the test ends.
func useSpill(t *testing.T, maxBytes int64) (*sectionSpill, string) {
	t.Helper()
	old := spill.Load()
	t.Cleanup(func() { spill.Store(old) })
	if maxBytes == 0 {
		spill.Store(nil)
		return nil, ""
	}
	dir := filepath.Join(t.TempDir(), "cache")
	if err := setSectionSpill(dir, maxBytes); err != nil {
		t.Fatal(err)
	}
	sp := spill.Load()
	t.Cleanup(func() { sp.dir.Close() })
	return sp, dir
}

// compressedDWARFBinary builds a C binary whose DWARF is stored
// zlib-compressed (SHF_COMPRESSED), as Debian's -dbg packages ship it, and
// returns it with the addresses of its functions.
func compressedDWARFBinary(t *testing.T) (string, []uint64) {
	t.Helper()
	bin := testworkload.BuildC(t, "cpuhog.c", "-O2", "-g", "-gz=zlib", "-fno-omit-frame-pointer")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if s := f.Section(".debug_info"); s == nil || s.Flags&elf.SHF_COMPRESSED == 0 {
		t.Fatalf("%s: .debug_info is not compressed", bin)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var addrs []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Size > 0 {
			addrs = append(addrs, s.Value, s.Value+s.Size/2)
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("%s: no functions", bin)
	}
	return bin, addrs
}

func lookupAll(t *testing.T, path string, addrs []uint64) ([][]Frame, *Binary) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openBinaryWith(f, newTableCache(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]Frame, len(addrs))
	named := 0
	for i, a := range addrs {
		out[i], _ = b.Symbolize(a)
		if len(out[i]) > 0 && out[i][0].Line > 0 {
			named++
		}
	}
	if named == 0 {
		t.Fatalf("%s: no address named with a line: the DWARF was not read", path)
	}
	return out, b
}

// TestSectionSpillNamesAsTheHeap decompresses a binary's compressed DWARF
// to disk: lookups name every address as with the sections in the heap,
// the table cache counts no heap for them, the files are unlinked, and
// closing the Binary gives their bytes back.
func TestSectionSpillNamesAsTheHeap(t *testing.T) {
	bin, addrs := compressedDWARFBinary(t)

	useSpill(t, 0)
	want, hb := lookupAll(t, bin, addrs)
	heapSrc := hb.dwarf.sourcesForTest(t)
	hb.Close()
	if heapSrc.heapBytes == 0 {
		t.Fatal("without a spill, the decompressed sections are not counted on the heap")
	}

	sp, dir := useSpill(t, 64<<20)
	got, b := lookupAll(t, bin, addrs)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lookups through spilled sections differ from those through the heap")
	}
	st := SectionSpillStats()
	if st.Sections == 0 || st.Bytes == 0 || st.Refused != 0 {
		t.Errorf("spill stats %+v: want sections spilled, none refused", st)
	}
	if src := b.dwarf.sourcesForTest(t); src.heapBytes != 0 {
		t.Errorf("%d bytes of sections counted on the heap with the spill", src.heapBytes)
	}
	names, err := sp.dir.ReadDir(spillSubdir)
	if err != nil || len(names) != 0 {
		t.Errorf("spill directory %s holds %v (%v): want the files unlinked", dir, names, err)
	}
	b.Close()
	if st := SectionSpillStats(); st.Bytes != 0 {
		t.Errorf("%d spilled bytes left after the Binary closed", st.Bytes)
	}
}

// TestSectionSpillBound refuses sections beyond the bound, counted; they
// are decompressed into the heap and still name every address.
func TestSectionSpillBound(t *testing.T) {
	bin, addrs := compressedDWARFBinary(t)
	useSpill(t, 0)
	want, hb := lookupAll(t, bin, addrs)
	hb.Close()

	useSpill(t, 1024) // smaller than any of the binary's sections
	got, b := lookupAll(t, bin, addrs)
	defer b.Close()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lookups with the sections refused by the spill differ")
	}
	st := SectionSpillStats()
	if st.Refused == 0 || st.Bytes > 1024 {
		t.Errorf("spill stats %+v under a 1024-byte bound: want refusals counted, at most 1024 bytes", st)
	}
	if src := b.dwarf.sourcesForTest(t); src.heapBytes == 0 {
		t.Errorf("refused sections not counted on the heap")
	}
}

// TestSectionSpillFollowsNoSymlink refuses a spill directory that is a
// symlink, or under a cache directory that is one.
func TestSectionSpillFollowsNoSymlink(t *testing.T) {
	useSpill(t, 0)
	base := t.TempDir()
	elsewhere := filepath.Join(base, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}

	cache := filepath.Join(base, "cache")
	if err := os.Mkdir(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(cache, spillSubdir)); err != nil {
		t.Fatal(err)
	}
	if err := setSectionSpill(cache, 1<<20); !errors.Is(err, safefs.ErrSymlink) {
		t.Errorf("spill directory a symlink: got %v, want %v", err, safefs.ErrSymlink)
	}

	link := filepath.Join(base, "cachelink")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	if err := setSectionSpill(link, 1<<20); !errors.Is(err, safefs.ErrSymlink) {
		t.Errorf("cache directory a symlink: got %v, want %v", err, safefs.ErrSymlink)
	}
	if spill.Load() != nil {
		t.Errorf("a spill was set up through a symlink")
	}
	if names, _ := os.ReadDir(elsewhere); len(names) != 0 {
		t.Errorf("the link's target was written: %v", names)
	}
}

// sourcesForTest returns the index's DWARF sections.
func (x *dwarfIndex) sourcesForTest(t *testing.T) *dwarfSources {
	t.Helper()
	u, err := x.units()
	if err != nil {
		t.Fatal(err)
	}
	src := x.sources(u)
	if src == nil {
		t.Fatal("no DWARF sections")
	}
	return src
}
