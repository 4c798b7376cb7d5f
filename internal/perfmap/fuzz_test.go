package perfmap

import (
	"bytes"
	"sort"
	"testing"
)

// FuzzPerfMap feeds arbitrary perf map text, in two appends, to the parser:
// a perf map is written by the profiled process, so it is untrusted. The
// result must stay sorted, deduplicated and within the bounds.
func FuzzPerfMap(f *testing.F) {
	f.Add([]byte("1000 100 LazyCompile:*fib /a.js:1\n"), []byte("2000 0x20 Builtin:Add\n"))
	f.Add([]byte("0x7f00 10 py::f:/x.py\n30"), []byte("00 5 tail\n"))
	f.Add([]byte("zz 1 a\n\n1 1\n"), []byte(" 1 1 b\r\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		c := New(1, 0)
		p := &processMap{}
		added, n := c.parse(p, bytes.NewReader(a))
		if n > int64(len(a)) {
			t.Fatalf("consumed %d of %d bytes", n, len(a))
		}
		rest := append(append([]byte(nil), a[n:]...), b...)
		c.parse(p, bytes.NewReader(rest))
		_ = added
		sort.SliceStable(p.symbols, func(i, j int) bool { return p.symbols[i].Start < p.symbols[j].Start })
		if len(p.symbols) > maxSymbolsPerProcess {
			t.Fatalf("%d symbols kept", len(p.symbols))
		}
		for _, s := range p.symbols {
			if len(s.Name) == 0 || len(s.Name) > maxLine {
				t.Fatalf("bad name %q", s.Name)
			}
		}
	})
}
