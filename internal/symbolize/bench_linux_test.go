//go:build linux

package symbolize

import (
	"os"
	"testing"
)

// BenchmarkSymbolize measures warm lookups: the tables are parsed before
// the timer starts.
func BenchmarkSymbolize(b *testing.B) {
	ws := builtWorkloads(b)
	for _, bc := range []struct{ name, bin, nm string }{
		{"go", "go", "go"},
		{"go-stripped", "go-stripped", "go"},
		{"c", "c-pie", "c-pie"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var funcs []nmFunc
			if ws[bc.nm].isGo {
				funcs = goNMFunctions(b, ws[bc.nm].path)
			} else {
				funcs = nmFunctions(b, ws[bc.nm].path)
			}
			addrs := sampleAddresses(funcs, 4)
			bin := openWorkload(b, ws[bc.bin].path)
			bin.Symbolize(addrs[0])
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				bin.Symbolize(addrs[i%len(addrs)])
			}
		})
	}
}

// BenchmarkOpenBinary measures the eager part of opening: headers, notes
// and build ids.
func BenchmarkOpenBinary(b *testing.B) {
	path := builtWorkloads(b)["go"].path
	b.ReportAllocs()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		bin, err := OpenBinary(f)
		if err != nil {
			b.Fatal(err)
		}
		if bin.BuildIDGo() == "" {
			b.Fatal("no Go build id")
		}
		bin.Close()
	}
}
