//go:build linux

package symbolize

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/bpfcol/bpfcol/internal/elfbin"
)

// TestTruncatedBinaryFaultsAreRecovered truncates a mapped binary under
// its Binary: reading the lost pages raises SIGBUS, which must end the
// lookup, not the collector.
func TestTruncatedBinaryFaultsAreRecovered(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, f := openCopy(t, exe)
	b, err := OpenBinary(f, NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.f.Data == nil {
		t.Fatal("the binary was not mapped")
	}
	// The test binary is not PIE: function values are its ELF addresses.
	before := uint64(reflect.ValueOf(heapInUse).Pointer())
	if fr, ok := b.Symbolize(before); !ok || fr[len(fr)-1].Name != "github.com/bpfcol/bpfcol/internal/symbolize.heapInUse" {
		t.Fatalf("Symbolize(%#x) = %v, %v before truncation", before, fr, ok)
	}
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	panics := elfbin.ParserPanics()
	after := uint64(reflect.ValueOf(mib).Pointer())
	if fr, ok := b.Symbolize(after); ok {
		t.Errorf("Symbolize(%#x) = %v after the file was truncated", after, fr)
	}
	if _, _, ok := b.FunctionStart(after); ok {
		t.Error("FunctionStart named an address after the file was truncated")
	}
	if _, err := b.LookupFunction("github.com/bpfcol/bpfcol/internal/symbolize.mib", ""); err == nil {
		t.Error("LookupFunction found a function after the file was truncated")
	}
	if n := elfbin.ParserPanics() - panics; n != 0 {
		t.Errorf("%d faults counted as parser panics", n)
	}
}

// TestTruncatedDWARFFaultsAreRecovered truncates a binary with compressed
// DWARF under its Binary before the DWARF is first read: the sections are
// read on goroutines of their own (the spill hashes the mapped compressed
// bytes), whose faults must fail the reading, not end the collector.
func TestTruncatedDWARFFaultsAreRecovered(t *testing.T) {
	bin, addrs := compressedDWARFBinary(t)
	tables, _, _ := spillTables(t, 64<<20)
	p, f := openCopy(t, bin)
	b, err := OpenBinary(f, tables)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.f.Data == nil {
		t.Fatal("the binary was not mapped")
	}
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	panics := elfbin.ParserPanics()
	b.loadDWARF()
	if b.dwarfErr == nil {
		t.Fatal("the DWARF of a truncated file was read without an error")
	}
	t.Logf("reading the truncated DWARF: %v", b.dwarfErr)
	for _, a := range addrs {
		if fr, ok := b.Symbolize(a); ok && len(fr) > 0 && fr[0].Line > 0 {
			t.Errorf("Symbolize(%#x) = %v: a line from a truncated file", a, fr)
		}
	}
	if n := elfbin.ParserPanics() - panics; n != 0 {
		t.Errorf("%d faults counted as parser panics", n)
	}
}

// openCopy copies src into the test's directory, a file the test may
// truncate, and opens the copy.
func openCopy(t *testing.T, src string) (string, *os.File) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, f
}
