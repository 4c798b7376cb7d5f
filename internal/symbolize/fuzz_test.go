package symbolize

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
)

// FuzzOpenBinary feeds corrupt ELF files through OpenBinary and every
// lookup a profile can trigger. Nothing may panic or hang, nor
// recover a panic that is not a fault (ParserPanics).
func FuzzOpenBinary(f *testing.F) {
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > symtest.MaxFuzzInput {
			return
		}
		p := filepath.Join(dir, "bin")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		file, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		before := elfbin.ParserPanics()
		defer func() {
			if n := elfbin.ParserPanics() - before; n != 0 {
				t.Fatalf("%d parser panics recovered", n)
			}
		}()
		b, err := OpenBinary(file, NewTables(0))
		if err != nil {
			return
		}
		defer b.Close()
		b.BuildIDGNU()
		b.DebugLink()
		b.HasDWARF()
		b.HasSymtab()
		for _, a := range symtest.FuzzAddresses {
			b.Symbolize(a)
			b.FunctionStart(a)
			b.ReadCode(a, 16)
			b.Mapper().FileOffsetToVirtualAddress(a)
		}
	})
}
