//go:build linux

package symbolize

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	manyUnitsOnce sync.Once
	manyUnitsPath string
	manyUnitsErr  error
)

// manyUnitsCPP builds, once per test process, a C++ program of many
// translation units instantiating standard containers and streams: large
// DWARF (uncompressed) in many compile units.
func manyUnitsCPP(tb testing.TB) string {
	tb.Helper()
	requireTools(tb, "g++")
	manyUnitsOnce.Do(func() {
		dir := filepath.Join(workloadDir, "manyunits")
		if manyUnitsErr = os.MkdirAll(dir, 0o755); manyUnitsErr != nil {
			return
		}
		args := []string{"-O1", "-g", "-o", filepath.Join(dir, "manyunits")}
		var decls, calls strings.Builder
		const units = 24
		for i := range units {
			src := fmt.Sprintf(`#include <map>
#include <string>
#include <sstream>
#include <vector>
#include <algorithm>
struct Rec%[1]d { std::string k; std::vector<long> v; };
long unit%[1]d(long n) {
  std::map<std::string, Rec%[1]d> m;
  for (long i = 0; i < n; i++) {
    std::ostringstream os; os << "k" << (i %% 7) << "u%[1]d";
    auto &r = m[os.str()]; r.k = os.str(); r.v.push_back(i);
    std::sort(r.v.begin(), r.v.end());
  }
  long s = 0; for (auto &e : m) s += (long)e.second.v.size() + (long)e.first.size();
  return s;
}
`, i)
			p := filepath.Join(dir, fmt.Sprintf("u%d.cpp", i))
			if manyUnitsErr = os.WriteFile(p, []byte(src), 0o644); manyUnitsErr != nil {
				return
			}
			args = append(args, p)
			fmt.Fprintf(&decls, "long unit%d(long);\n", i)
			fmt.Fprintf(&calls, "  s += unit%d(argc);\n", i)
		}
		mainSrc := filepath.Join(dir, "main.cpp")
		manyUnitsErr = os.WriteFile(mainSrc, []byte(decls.String()+"int main(int argc, char **) {\n  long s = 0;\n"+calls.String()+"  return (int)s;\n}\n"), 0o644)
		if manyUnitsErr != nil {
			return
		}
		cmd := exec.Command("g++", append(args, mainSrc)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			manyUnitsErr = fmt.Errorf("building the C++ workload: %v\n%s", err, out)
			return
		}
		manyUnitsPath = filepath.Join(dir, "manyunits")
	})
	if manyUnitsErr != nil {
		tb.Fatal(manyUnitsErr)
	}
	return manyUnitsPath
}

// largeGoBinary returns the collector, bpfcol, built with DWARF (ocb's
// build strips it) from the sources `make build` generates in _build: a Go
// binary of more than 30 MB.
func largeGoBinary(tb testing.TB) string {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "..", "..", "_build")
	if _, err := os.Stat(filepath.Join(src, "main.go")); err != nil {
		tb.Fatalf("%s holds no collector sources: run `make build` first (make test does): %v", src, err)
	}
	bin := filepath.Join(workloadDir, "bpfcol-dwarf")
	if _, err := os.Stat(bin); err != nil {
		cmd := exec.Command("go", "build", "-o", bin, ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("building bpfcol with DWARF: %v\n%s", err, out)
		}
	}
	if fi, err := os.Stat(bin); err != nil || fi.Size() < 30<<20 {
		tb.Fatalf("%s: want a Go binary of 30 MB or more: %v %v", bin, fi, err)
	}
	return bin
}

// heapInUse returns the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// openWith opens path with its tables in tables.
func openWith(tb testing.TB, path string, tables *Tables) *Binary {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := OpenBinary(f, tables)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// tableWorkload is what the accounting test loads: the symbol tables of a
// large Go binary (.gopclntab in place, .symtab indexed) and the symbol
// table and every compile unit of a C++ binary with DWARF.
type tableWorkload struct {
	goBin, cppBin     string
	goAddrs, cppAddrs []uint64
}

func loadTableWorkload(tb testing.TB) tableWorkload {
	w := tableWorkload{goBin: largeGoBinary(tb), cppBin: manyUnitsCPP(tb)}
	w.goAddrs = textAddresses(tb, w.goBin, 20000)
	w.cppAddrs = textAddresses(tb, w.cppBin, 20000)
	return w
}

// symbolizeAll names every address of w through binaries whose tables are
// in tables, calling check after each batch. It returns how many were
// named.
func (w tableWorkload) symbolizeAll(tb testing.TB, tables *Tables, check func()) int {
	goBin, cppBin := openWith(tb, w.goBin, tables), openWith(tb, w.cppBin, tables)
	named := 0
	for i := range w.goAddrs {
		if _, ok := goBin.Symbolize(w.goAddrs[i]); ok {
			named++
		}
		// The Go binary's .symtab, indexed: the native-code path.
		if _, ok := goBin.elfSyms.lookup(w.goAddrs[i]); ok {
			named++
		}
		if _, ok := cppBin.Symbolize(w.cppAddrs[i]); ok {
			named++
		}
		if i%2000 == 1999 {
			check()
		}
	}
	return named
}

// TestTableCacheAccountsForTheHeap loads the symbol tables of a large Go
// binary and of a C++ binary with DWARF, and checks the table cache's
// accounting against the runtime's heap: unbounded, the cost it reports is
// within a factor of two of the heap the tables took; bounded small, the
// live heap stays within the bound plus a fixed slack (the Binaries' own
// headers and the test's address lists) however many addresses are named.
func TestTableCacheAccountsForTheHeap(t *testing.T) {
	w := loadTableWorkload(t)

	// Unbounded: everything parsed stays; compare cost and heap growth.
	before := heapInUse()
	all := NewTables(1 << 40)
	named := w.symbolizeAll(t, all, func() {})
	grown := heapInUse() - before
	st := all.Stats()
	t.Logf("unbounded: %d names, %d tables, cost %.1f MB, heap grew %.1f MB", named, st.Len, mib(st.Cost), mib(grown))
	if named < len(w.goAddrs) {
		t.Fatalf("only %d of %d lookups named: the tables were not read", named, 3*len(w.goAddrs))
	}
	if st.Cost < grown/2 || st.Cost > grown*2 {
		t.Errorf("the cache reports %.1f MB for %.1f MB of heap: accounting off by more than 2x", mib(st.Cost), mib(grown))
	}
	runtime.KeepAlive(all)
	all.setMax(1) // drop it before the bounded run

	// Bounded small: the heap held stays within the bound plus slack.
	const bound = 1 << 20
	const slack = 6 << 20
	before = heapInUse()
	small := NewTables(bound)
	var peak int64
	named = w.symbolizeAll(t, small, func() {
		peak = max(peak, heapInUse()-before)
	})
	st = small.Stats()
	t.Logf("bound %.1f MB: %d names, %d tables held, cost %.1f MB, %d evictions, heap peak %.1f MB above the start", mib(bound), named, st.Len, mib(st.Cost), st.Evictions, mib(peak))
	if st.Evictions == 0 {
		t.Fatalf("no evictions under a %d-byte bound: the workload does not exercise it", bound)
	}
	if st.Cost > bound {
		t.Errorf("cost %d above the bound %d", st.Cost, bound)
	}
	if peak > bound+slack {
		t.Errorf("heap peaked %.1f MB above the start, more than the %.1f MB bound plus %.1f MB slack", mib(peak), mib(bound), mib(slack))
	}
	runtime.KeepAlive(small)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
