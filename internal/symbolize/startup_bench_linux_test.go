package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// libcDebugFile returns the path of the installed libc's separate debug
// file (libc6-dbg), its symbol table and the libc itself.
func libcDebugFile(tb testing.TB) (string, []elf.Symbol) {
	tb.Helper()
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := os.Open(libc)
	if err != nil {
		tb.Fatalf("libc6 is needed: %v", err)
	}
	defer f.Close()
	b, err := OpenBinary(f)
	if err != nil {
		tb.Fatal(err)
	}
	id := b.BuildIDGNU()
	b.Close()
	if len(id) < 3 {
		tb.Fatalf("%s has no build id", libc)
	}
	dbg := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	ef, err := elf.Open(dbg)
	if err != nil {
		tb.Fatalf("libc6-dbg is needed (scripts/install-deps.sh installs it): %v", err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		tb.Fatal(err)
	}
	return dbg, syms
}

// BenchmarkColdLibcDebug measures what naming the first address of a
// process in libc costs a collector that just started: libc6-dbg's debug
// file opened, its compressed DWARF read and indexed, one unit parsed.
// "cold" starts with an empty cache directory, so the sections are
// decompressed; "kept" with the one an earlier run left, as a restart on
// the same host does, and fails unless the sections were reused from it.
// The name must match the symbol table's.
func BenchmarkColdLibcDebug(b *testing.B) {
	dbg, syms := libcDebugFile(b)
	var addr uint64
	const want = "__libc_start_call_main"
	for _, s := range syms {
		if s.Name == want && s.Value != 0 {
			addr = s.Value + 8
		}
	}
	if addr == 0 {
		b.Fatalf("%s: no %s", dbg, want)
	}
	name := func(b *testing.B, dir string) SpillStats {
		old := spill.Load()
		if err := setSectionSpill(dir, DefaultMaxSpillBytes); err != nil {
			b.Fatal(err)
		}
		defer func() {
			spill.Load().dir.Close()
			spill.Store(old)
		}()
		f, err := os.Open(dbg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		bin, err := openBinaryWith(f, newTableCache(DefaultMaxTableBytes))
		if err != nil {
			b.Fatal(err)
		}
		frames, ok := bin.Symbolize(addr)
		if !ok || frames[len(frames)-1].Function != want {
			b.Fatalf("%#x named %v, want %s", addr, frames, want)
		}
		bin.Close()
		b.StopTimer()
		return SectionSpillStats()
	}
	b.Run("cold", func(b *testing.B) {
		b.StopTimer()
		for range b.N {
			if st := name(b, filepath.Join(b.TempDir(), "cache")); st.Sections == 0 || st.Reused != 0 {
				b.Fatalf("spill stats %+v: want sections decompressed, none reused", st)
			}
		}
	})
	b.Run("kept", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "cache")
		b.StopTimer()
		name(b, dir)
		for range b.N {
			if st := name(b, dir); st.Reused == 0 || st.Reused != st.Sections {
				b.Fatalf("spill stats %+v: want every section reused", st)
			}
		}
	})
}
