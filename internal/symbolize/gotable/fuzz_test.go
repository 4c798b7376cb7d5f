package gotable

import (
	"bytes"
	"testing"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
)

// FuzzGopclntab feeds corrupt .gopclntab contents through the Go table
// reader.
func FuzzGopclntab(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, textStart uint64) {
		if len(data) > symtest.MaxFuzzInput {
			return
		}
		before := elfbin.ParserPanics()
		defer func() {
			if n := elfbin.ParserPanics() - before; n != 0 {
				t.Fatalf("%d parser panics recovered", n)
			}
		}()
		tab, err := Parse(data, textStart)
		if err != nil {
			return
		}
		// The inline tree reads its entries through the same bytes.
		tab.inline = newGoInlineTree(data, textStart, 1, bytes.NewReader(data))
		for _, a := range append(symtest.FuzzAddresses, textStart, textStart+1, textStart+64) {
			tab.Lookup(a)
			tab.FunctionRange(a)
		}
	})
}
