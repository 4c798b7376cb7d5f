package symbolize

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/safefs"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// spillTables returns Tables of 64 MiB whose Binaries spill to a new
// private directory, bounded by maxBytes, until the test ends.
func spillTables(t *testing.T, maxBytes int64) (*Tables, *sectionSpill, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	tables := NewTables(64 << 20)
	sp, _ := spillTo(t, tables, dir, maxBytes)
	return tables, sp, dir
}

// spillTo has tables' Binaries spill under dir until the test ends, or
// until stop (a restart's end) is called.
func spillTo(tb testing.TB, tables *Tables, dir string, maxBytes int64) (_ *sectionSpill, stop func()) {
	tb.Helper()
	sp, err := acquireSectionSpill(dir, maxBytes)
	if err != nil {
		tb.Fatal(err)
	}
	tables.spill.Store(sp)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			tables.spill.CompareAndSwap(sp, nil)
			sp.release()
		})
	}
	tb.Cleanup(stop)
	return sp, stop
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

// lookupAll names addrs in the binary at path, its tables held in tables
// (nil: its own, which spill nothing).
func lookupAll(t *testing.T, path string, addrs []uint64, tables *Tables) ([][]frame.Line, *Binary) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if tables == nil {
		tables = NewTables(64 << 20)
	}
	b, err := OpenBinary(f, tables)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]frame.Line, len(addrs))
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

	want, hb := lookupAll(t, bin, addrs, nil)
	heapBytes := sectionsHeap(t, hb)
	hb.Close()
	if heapBytes == 0 {
		t.Fatal("without a spill, the decompressed sections are not counted on the heap")
	}

	tables, sp, dir := spillTables(t, 64<<20)
	got, b := lookupAll(t, bin, addrs, tables)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lookups through spilled sections differ from those through the heap")
	}
	st := tables.spillStats()
	if st.Sections == 0 || st.Bytes == 0 || st.Refused != 0 {
		t.Errorf("spill stats %+v: want sections spilled, none refused", st)
	}
	if n := sectionsHeap(t, b); n != 0 {
		t.Errorf("%d bytes of sections counted on the heap with the spill", n)
	}
	names, err := sp.dir.ReadDir(spillSubdir)
	if err != nil || len(names) != 0 {
		t.Errorf("spill directory %s holds %v (%v): want the files unlinked", dir, names, err)
	}
	b.Close()
	if st := tables.spillStats(); st.Bytes != 0 {
		t.Errorf("%d spilled bytes left after the Binary closed", st.Bytes)
	}
}

// TestSectionSpillBound refuses sections beyond the bound, counted; they
// are decompressed into the heap and still name every address.
func TestSectionSpillBound(t *testing.T) {
	bin, addrs := compressedDWARFBinary(t)
	want, hb := lookupAll(t, bin, addrs, nil)
	hb.Close()

	tables, _, _ := spillTables(t, 1024) // smaller than any of the binary's sections
	got, b := lookupAll(t, bin, addrs, tables)
	defer b.Close()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lookups with the sections refused by the spill differ")
	}
	st := tables.spillStats()
	if st.Refused == 0 || st.Bytes > 1024 {
		t.Errorf("spill stats %+v under a 1024-byte bound: want refusals counted, at most 1024 bytes", st)
	}
	if sectionsHeap(t, b) == 0 {
		t.Errorf("refused sections not counted on the heap")
	}
}

// TestSectionSpillFollowsNoSymlink refuses a spill directory that is a
// symlink, or under a cache directory that is one.
func TestSectionSpillFollowsNoSymlink(t *testing.T) {
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
	if _, err := acquireSectionSpill(cache, 1<<20); !errors.Is(err, safefs.ErrSymlink) {
		t.Errorf("spill directory a symlink: got %v, want %v", err, safefs.ErrSymlink)
	}

	link := filepath.Join(base, "cachelink")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	if _, err := acquireSectionSpill(link, 1<<20); !errors.Is(err, safefs.ErrSymlink) {
		t.Errorf("cache directory a symlink: got %v, want %v", err, safefs.ErrSymlink)
	}
	openSpills.mu.Lock()
	opened := openSpills.byDir[cache] != nil || openSpills.byDir[link] != nil
	openSpills.mu.Unlock()
	if opened {
		t.Errorf("a spill was set up through a symlink")
	}
	if names, _ := os.ReadDir(elsewhere); len(names) != 0 {
		t.Errorf("the link's target was written: %v", names)
	}
}

// sectionsHeap returns the heap the index's DWARF sections take.
func sectionsHeap(t *testing.T, b *Binary) int64 {
	t.Helper()
	n, err := b.dwarf.SectionsHeap()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSectionSpillKeptAcrossRestarts keeps the decompressed sections of a
// file on disk: a new spill on the same directory (a restart) maps them
// again instead of decompressing, names every address the same, and a
// kept file whose content was altered, or a link planted among them, is
// removed and never used.
func TestSectionSpillKeptAcrossRestarts(t *testing.T) {
	bin, addrs := compressedDWARFBinary(t)
	want, hb := lookupAll(t, bin, addrs, nil)
	hb.Close()

	dir := filepath.Join(t.TempDir(), "cache")
	tables := NewTables(64 << 20)
	_, stop := spillTo(t, tables, dir, 64<<20)
	got, b := lookupAll(t, bin, addrs, tables)
	b.Close()
	if !reflect.DeepEqual(got, want) {
		t.Fatal("lookups through spilled sections differ from those through the heap")
	}
	first := tables.spillStats()
	if first.KeptBytes == 0 || first.Reused != 0 {
		t.Fatalf("spill stats %+v: want sections kept, none reused", first)
	}
	kept, err := os.ReadDir(filepath.Join(dir, keptSubdir))
	if err != nil || len(kept) == 0 {
		t.Fatalf("kept sections: %v (%v)", kept, err)
	}

	// A restart: the spill closed, another opened on its directory.
	restart := func() SpillStats {
		t.Helper()
		stop()
		tables = NewTables(64 << 20)
		_, stop = spillTo(t, tables, dir, 64<<20)
		got, b := lookupAll(t, bin, addrs, tables)
		b.Close()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("lookups after a restart differ from those through the heap")
		}
		return tables.spillStats()
	}
	if st := restart(); st.Reused == 0 || st.Reused != st.Sections {
		t.Errorf("spill stats after a restart %+v: want every section reused", st)
	}

	// One byte of one kept file's content altered; a link planted.
	victim := filepath.Join(dir, keptSubdir, kept[0].Name())
	data, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0xff
	if err := os.WriteFile(victim, data, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, data, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, keptSubdir, "0000"+keptSuffix)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	st := restart()
	if st.Reused != st.Sections-1 {
		t.Errorf("spill stats with one kept file altered %+v: want all but it reused", st)
	}
	if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a link among the kept sections was left: %v", err)
	}
	if again, err := os.ReadFile(victim); err != nil || bytes.Equal(again, data) {
		t.Errorf("the altered kept file was not replaced (%v)", err)
	}
}

// TestSymbolizersCloseTheirSpill checks that the section spill under a
// Symbolizer's cache directory lives only as long as a Symbolizer uses it:
// its directory closed and the spill gone once the last one is closed, so
// a receiver started and shut down leaves no descriptor behind.
func TestSymbolizersCloseTheirSpill(t *testing.T) {
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	before := fds()
	cfg := SymbolizerConfig{CacheDir: filepath.Join(t.TempDir(), "cache")}
	first, err := NewSymbolizer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewSymbolizer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Each has tables of its own, the spill of the directory they share.
	sp := first.cfg.Tables.spill.Load()
	if sp == nil || second.cfg.Tables.spill.Load() != sp {
		t.Fatal("no spill under the cache directory, or one per Symbolizer")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if first.cfg.Tables.spill.Load() != nil || second.cfg.Tables.spill.Load() != sp {
		t.Fatal("the spill went with the first Symbolizer while the second still uses it, or stayed in the first's tables")
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	openSpills.mu.Lock()
	open := openSpills.byDir[filepath.Clean(cfg.CacheDir)] != nil
	openSpills.mu.Unlock()
	if second.cfg.Tables.spill.Load() != nil || open {
		t.Error("the spill stayed after its last Symbolizer was closed")
	}
	if after := fds(); after != before {
		t.Errorf("%d fds after both Symbolizers closed, %d before", after, before)
	}
}
