package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/bpfcol/bpfcol/internal/process"
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
// The name must match the symbol table's.
func BenchmarkColdLibcDebug(b *testing.B) {
	_ = process.FileKey{}
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
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "cache")
		old := spill.Load()
		if err := setSectionSpill(dir, DefaultMaxSpillBytes); err != nil {
			b.Fatal(err)
		}
		tables := newTableCache(DefaultMaxTableBytes)
		f, err := os.Open(dbg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		bin, err := openBinaryWith(f, tables)
		if err != nil {
			b.Fatal(err)
		}
		frames, ok := bin.Symbolize(addr)
		if !ok || frames[len(frames)-1].Function != want {
			b.Fatalf("%#x named %v, want %s", addr, frames, want)
		}
		bin.Close()
		b.StopTimer()
		spill.Load().dir.Close()
		spill.Store(old)
		b.StartTimer()
	}
}
