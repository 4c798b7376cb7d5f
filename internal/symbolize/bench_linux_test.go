//go:build linux

package symbolize

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/frame"
)

// maxMissShare is the share of addresses a benchmark may name differently
// from the ground truth: the accuracy tests' 99.9% rule.
const maxMissShare = 0.001

// physicalNames returns, per address of bin, the physical function the
// ground truth names there, "" where it names none: go tool addr2line for
// Go binaries, addr2line over the symbol table otherwise (as in
// TestSymbolizeGo and TestSymbolizeC).
func physicalNames(tb testing.TB, bin string, isGo bool, addrs []uint64) []string {
	tb.Helper()
	names := make([]string, len(addrs))
	if isGo {
		for i, r := range addr2line(tb, addrs, "go", "tool", "addr2line", bin) {
			if r.function != "?" {
				names[i] = r.function
			}
		}
	} else {
		// Symbolize names the physical function from the symbol table (by
		// its alias rule) also when DWARF names the inlined ones: addr2line
		// on a copy without DWARF answers from the same table.
		nodebug := bin + ".nodebug-bench"
		run(tb, "", "objcopy", "--strip-debug", bin, nodebug)
		for i, r := range addr2line(tb, addrs, "addr2line", "-f", "-e", nodebug) {
			if r.function != "??" {
				names[i] = r.function
			}
		}
	}
	known := 0
	for _, n := range names {
		if n != "" {
			known++
		}
	}
	// The truth itself must cover the addresses, or there is nothing to
	// check against.
	if known < len(addrs)*9/10 {
		tb.Fatalf("ground truth names only %d of %d addresses of %s", known, len(addrs), bin)
	}
	return names
}

// nameChecker counts, over a benchmark's results, how many named the
// physical function differently from the ground truth.
type nameChecker struct {
	checked, misses int
	firstMiss       string
}

func (c *nameChecker) check(addr uint64, want string, frames []frame.Line, ok bool) {
	if want == "" {
		return
	}
	c.checked++
	if ok && len(frames) > 0 && frames[len(frames)-1].Name == want {
		return
	}
	c.misses++
	if c.firstMiss == "" {
		c.firstMiss = framesSummary(addr, want, frames)
	}
}

// assert fails b when nothing was checked or too many names were wrong,
// and reports the miss share.
func (c *nameChecker) assert(b *testing.B) {
	b.Helper()
	if c.checked == 0 {
		b.Fatal("no result was checked against the ground truth")
	}
	share := float64(c.misses) / float64(c.checked)
	b.ReportMetric(100*share, "miss-%")
	if share > maxMissShare {
		b.Fatalf("%d of %d results name the wrong function or none (%.3f%%, bound %.1f%%), first: %s",
			c.misses, c.checked, 100*share, 100*maxMissShare, c.firstMiss)
	}
}

func framesSummary(addr uint64, want string, frames []frame.Line) string {
	var got []string
	for _, f := range frames {
		got = append(got, f.Name)
	}
	return fmt.Sprintf("%#x: got [%s], want %s", addr, strings.Join(got, " < "), want)
}

// BenchmarkSymbolize measures warm lookups: the tables are parsed before
// the timer starts. Every result is checked against the ground truth's
// physical function (a string comparison, negligible beside a lookup).
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
			want := physicalNames(b, ws[bc.bin].path, ws[bc.bin].isGo, addrs)
			bin := openWorkload(b, ws[bc.bin].path)
			var c nameChecker
			frames, ok := bin.Symbolize(addrs[0])
			c.check(addrs[0], want[0], frames, ok)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				k := i % len(addrs)
				frames, ok := bin.Symbolize(addrs[k])
				c.check(addrs[k], want[k], frames, ok)
			}
			c.assert(b)
		})
	}
}

// BenchmarkOpenBinary measures the eager part of opening: headers, notes
// and build ids. The Go build id must be the one go tool buildid reads.
func BenchmarkOpenBinary(b *testing.B) {
	path := builtWorkloads(b)["go"].path
	want := strings.TrimSpace(run(b, "", "go", "tool", "buildid", path))
	if want == "" {
		b.Fatal("go tool buildid printed nothing")
	}
	b.ReportAllocs()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		bin, err := OpenBinary(f, NewTables(0))
		if err != nil {
			b.Fatal(err)
		}
		if got := bin.BuildIDGo(); got != want {
			b.Fatalf("BuildIDGo() = %q, go tool buildid says %q", got, want)
		}
		bin.Close()
	}
}
