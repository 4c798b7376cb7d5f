package symbolize

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/symbolize/dwarfsym"
	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestPrefixNamesLibcStartFromTheFront names libc's start-up frame from
// libc6-dbg's compressed DWARF, as a first start does: only the front of
// its sections is decompressed for it, a quarter of them at most. Then
// addresses all over libc name as with the sections decompressed into the
// heap, all answered by the prefix, and a restart maps the sections kept
// whole, decompressing nothing.
func TestPrefixNamesLibcStartFromTheFront(t *testing.T) {
	dbg, syms := symtest.LibcDebugFile(t)
	ef, err := elf.Open(dbg)
	if err != nil {
		t.Fatal(err)
	}
	var whole int64
	for _, name := range []string{".debug_info", ".debug_abbrev", ".debug_line"} {
		s := ef.Section(name)
		if s == nil || s.Flags&elf.SHF_COMPRESSED == 0 {
			t.Fatalf("%s: %s is not compressed", dbg, name)
		}
		whole += int64(s.Size)
	}
	ef.Close()
	const start = "__libc_start_call_main"
	var first uint64
	var addrs []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Size == 0 {
			continue
		}
		if s.Name == start {
			first = s.Value + 8
		}
		addrs = append(addrs, s.Value+s.Size/2)
	}
	if first == 0 || len(addrs) < 100 {
		t.Fatalf("%s: no %s, or %d functions", dbg, start, len(addrs))
	}
	addrs = append([]uint64{first}, addrs...)

	want, hb := lookupAll(t, dbg, addrs, nil)
	hb.Close()

	dir := filepath.Join(t.TempDir(), "cache")
	tables := NewTables(64 << 20)
	_, stop := spillTo(t, tables, dir, 1<<30)
	f, err := os.Open(dbg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBinary(f, tables)
	if err != nil {
		t.Fatal(err)
	}
	frames, ok := b.Symbolize(first)
	if b.dwarf == nil || !b.dwarf.ByPrefix() {
		t.Fatal("libc6-dbg's DWARF is not read by prefix")
	}
	if !ok || frames[len(frames)-1].Name != start || !reflect.DeepEqual(frames, want[0]) {
		t.Fatalf("%#x named %v, want %v", first, frames, want[0])
	}
	st := tables.spillStats()
	if st.Inflated == 0 || st.Inflated > whole/4 {
		t.Errorf("naming %s decompressed %d bytes of .debug_info, .debug_abbrev and .debug_line's %d: want the front only", start, st.Inflated, whole)
	}
	t.Logf("naming %s decompressed %d of %d bytes", start, st.Inflated, whole)
	byPrefix := 0
	for i, a := range addrs {
		on := b.dwarf.ByPrefix()
		got, _ := b.Symbolize(a)
		if on && b.dwarf.ByPrefix() {
			byPrefix++
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("%#x: named %v through the prefix, %v through the heap", a, got, want[i])
		}
	}
	// libc6-dbg lists every unit in .debug_aranges: the prefix answers
	// every address, those of no unit too (libgcc's, in assembly).
	if byPrefix != len(addrs) {
		t.Errorf("%d of %d addresses named by the prefix: want all", byPrefix, len(addrs))
	}
	b.Close()
	if st := tables.spillStats(); st.Bytes != 0 {
		t.Errorf("%d spilled bytes left after the Binary closed", st.Bytes)
	}

	// Units all over libc were read: every section was decompressed
	// whole and kept, and a restart maps them.
	stop()
	restarted := NewTables(64 << 20)
	spillTo(t, restarted, dir, 1<<30)
	got, b2 := lookupAll(t, dbg, addrs, restarted)
	b2.Close()
	if !reflect.DeepEqual(got, want) {
		t.Error("lookups after a restart differ from those through the heap")
	}
	if st := restarted.spillStats(); st.Reused == 0 || st.Reused != st.Sections || st.Inflated != 0 {
		t.Errorf("spill stats after a restart %+v: want every section reused, none decompressed", st)
	}
}

// TestPrefixCorruptStreamKeepsNothing changes a byte near the end of
// libc6-dbg's compressed .debug_info in a copy: an address of the last
// units gets no line from DWARF (the stream fails there, then the whole
// index fails as without prefixes), nothing panics, and the section is
// not kept for a restart.
func TestPrefixCorruptStreamKeepsNothing(t *testing.T) {
	dbg, syms := symtest.LibcDebugFile(t)
	ef, err := elf.Open(dbg)
	if err != nil {
		t.Fatal(err)
	}
	s := ef.Section(".debug_info")
	if s == nil || s.Flags&elf.SHF_COMPRESSED == 0 {
		t.Fatalf("%s: .debug_info is not compressed", dbg)
	}
	off, n := s.Offset, s.FileSize
	ef.Close()
	var last, first uint64
	for _, sym := range syms {
		if elf.ST_TYPE(sym.Info) == elf.STT_FUNC && sym.Size > 0 && sym.Value > last {
			if sym.Name != "__multf3" && !strings.HasPrefix(sym.Name, "__") {
				last = sym.Value
			}
		}
		if sym.Name == "__libc_start_call_main" {
			first = sym.Value + 8
		}
	}
	// Through the intact file, both have lines.
	intact, ib := lookupAll(t, dbg, []uint64{first, last + 4}, nil)
	ib.Close()
	for i, fr := range intact {
		if len(fr) == 0 || fr[0].Line == 0 {
			t.Fatalf("address %d named %v without a line in the intact file", i, fr)
		}
	}
	p, f := openCopy(t, dbg)
	f.Close()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[off+n*9/10] ^= 0x55
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	tables, _, dir := spillTables(t, 1<<30)
	f, err = os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBinary(f, tables)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, ok := b.Symbolize(first); !ok {
		t.Errorf("%#x not named", first)
	}
	if b.dwarf == nil || !b.dwarf.ByPrefix() {
		t.Fatal("the copy's DWARF is not read by prefix")
	}
	if fr, _ := b.Symbolize(last + 4); len(fr) > 0 && fr[0].Line > 0 {
		t.Errorf("%#x named %v: a line from past the corrupt byte", last+4, fr)
	}
	key := keptKey(".debug_info", data[off:off+n])
	names, err := os.ReadDir(filepath.Join(dir, keptSubdir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		if e.Name() == keptName(key) {
			t.Errorf("the corrupt .debug_info was kept as %s", e.Name())
		}
	}
}

// TestPrefixUnlistedUnitReadWhole links a unit built by gcc, which lists
// it in .debug_aranges, with one built by clang, which does not, their
// DWARF compressed: the prefix names the listed unit's function, and an
// address of the unlisted one has the whole index built, which names it.
// Every address names as with the sections in the heap.
func TestPrefixUnlistedUnitReadWhole(t *testing.T) {
	dir := t.TempDir()
	src := map[string]string{
		"a.c": "int fb(int);\nint fa(int x) { return fb(x) * 3 + 1; }\nint main(int argc, char **argv) { return fa(argc) & 1; }\n",
		"b.c": "int fb(int x) {\n\tint s = 0;\n\tfor (int i = 0; i < x * 100; i++)\n\t\ts += i ^ x;\n\treturn s;\n}\n",
	}
	for name, text := range src {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "mix")
	for _, args := range [][]string{
		{"gcc", "-g", "-O1", "-c", "a.c", "-o", "a.o"},
		{"clang", "-g", "-O1", "-c", "b.c", "-o", "b.o"},
		{"gcc", "a.o", "b.o", "-o", bin, "-Wl,--compress-debug-sections=zlib"},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v (gcc and clang are needed): %v\n%s", args, err, out)
		}
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	info, aranges := ef.Section(".debug_info"), ef.Section(".debug_aranges")
	ef.Close()
	if info == nil || info.Flags&elf.SHF_COMPRESSED == 0 || aranges == nil {
		t.Fatalf("%s: want compressed .debug_info and .debug_aranges", bin)
	}
	at := map[string]uint64{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 {
			at[s.Name] = s.Value + s.Size/2
		}
	}
	addrs := []uint64{at["fa"], at["main"], at["fb"]}
	if slices.Contains(addrs, 0) {
		t.Fatalf("%s: functions at %v", bin, at)
	}

	want, hb := lookupAll(t, bin, addrs, nil)
	hb.Close()
	for i, fr := range want {
		if len(fr) == 0 || fr[0].Line == 0 {
			t.Fatalf("address %d named %v through the heap: want a line", i, fr)
		}
	}

	tables, _, _ := spillTables(t, 64<<20)
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBinary(f, tables)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, a := range addrs {
		got, _ := b.Symbolize(a)
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("%#x: named %v by prefix, %v through the heap", a, got, want[i])
		}
		if prefix := b.dwarf.ByPrefix(); prefix != (i < 2) {
			t.Errorf("after naming %#x, reading by prefix: %v; want it up to the unlisted unit's address", a, prefix)
		}
	}
}

// FuzzDWARFPrefix feeds corrupt ELF files with compressed DWARF through a
// Binary reading it by prefix and one reading it whole, both spilling to
// disk: nothing may panic, and every lookup must name the same.
func FuzzDWARFPrefix(f *testing.F) {
	seed := testworkload.BuildC(f, "cpuhog.c", "-O2", "-g", "-gz=zlib", "-fno-omit-frame-pointer")
	for _, p := range []string{seed} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	// In memory where there is some: freeing a file's blocks on this disk
	// waits for the device, and each input rewrites and removes files.
	dir := f.TempDir()
	if shm, err := os.MkdirTemp("/dev/shm", "bpfcol-fuzz-"); err == nil {
		dir = shm
		f.Cleanup(func() { os.RemoveAll(shm) })
	}
	spills := map[bool]*sectionSpill{}
	for _, prefix := range []bool{true, false} {
		sp, err := openSectionSpill(filepath.Join(dir, fmt.Sprint("cache-", prefix)), 64<<20)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { sp.dir.Close() })
		spills[prefix] = sp
	}
	f.Cleanup(func() { dwarfsym.ReadByPrefix.Store(true) })
	path := filepath.Join(dir, "bin")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > symtest.MaxFuzzInput {
			return
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		addrs := slices.Clone(symtest.FuzzAddresses)
		if syms, err := ef.Symbols(); err == nil {
			for _, s := range syms[:min(len(syms), 64)] {
				addrs = append(addrs, s.Value, s.Value+s.Size/2)
			}
		}
		names := map[bool][][]frame.Line{}
		for _, prefix := range []bool{true, false} {
			tables := NewTables(1 << 20)
			tables.spill.Store(spills[prefix])
			dwarfsym.ReadByPrefix.Store(prefix)
			fd, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			b, err := OpenBinary(fd, tables)
			if err != nil {
				return
			}
			for _, a := range addrs {
				fr, _ := b.Symbolize(a)
				names[prefix] = append(names[prefix], fr)
			}
			b.Close()
		}
		for i, a := range addrs {
			if !reflect.DeepEqual(names[true][i], names[false][i]) {
				t.Errorf("%#x: named %v by prefix, %v whole", a, names[true][i], names[false][i])
			}
		}
	})
}
