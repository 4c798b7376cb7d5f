package gotable

import (
	"bytes"
	"testing"

	"github.com/bpfcol/bpfcol/internal/elfbin"
)

// fuzzAddresses are looked up in every fuzzed input: low addresses, typical
// non-PIE and PIE text addresses, and the extremes.
var fuzzAddresses = []uint64{0, 1, 0x1000, 0x1139, 0x401000, 0x401139, 1<<63 - 1, ^uint64(0)}

// maxFuzzInput keeps inputs ELF-sized: larger ones only slow the fuzzer.
const maxFuzzInput = 1 << 20

// FuzzGopclntab feeds corrupt .gopclntab contents through the Go table
// reader.
func FuzzGopclntab(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, textStart uint64) {
		if len(data) > maxFuzzInput {
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
		for _, a := range append(fuzzAddresses, textStart, textStart+1, textStart+64) {
			tab.Lookup(a)
			tab.FunctionRange(a)
		}
	})
}
