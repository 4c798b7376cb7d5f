//go:build linux

package symbolize

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestTruncatedBinaryFaultsAreRecovered truncates a mapped binary under
// its Binary: reading the lost pages raises SIGBUS, which must end the
// lookup, not the collector.
func TestTruncatedBinaryFaultsAreRecovered(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
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
	b, err := OpenBinary(f)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.data == nil {
		t.Fatal("the binary was not mapped")
	}
	// The test binary is not PIE: function values are its ELF addresses.
	before := uint64(reflect.ValueOf(heapInUse).Pointer())
	if fr, ok := b.Symbolize(before); !ok || fr[len(fr)-1].Function != "github.com/bpfcol/bpfcol/internal/symbolize.heapInUse" {
		t.Fatalf("Symbolize(%#x) = %v, %v before truncation", before, fr, ok)
	}
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
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
}
