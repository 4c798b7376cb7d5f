//go:build linux

package symbolize

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestLookupFunctionC finds every uniquely named function of the C
// workloads where nm says it is.
func TestLookupFunctionC(t *testing.T) {
	ws := builtWorkloads(t)
	for _, name := range []string{"c-pie", "c-nopie"} {
		t.Run(name, func(t *testing.T) {
			b := openWorkload(t, ws[name].path)
			byName := map[string][]nmFunc{}
			for _, f := range nmFunctions(t, ws[name].path) {
				byName[f.name] = append(byName[f.name], f)
			}
			checked := 0
			for n, fs := range byName {
				// IFUNCs resolve elsewhere; a local name defined twice is
				// ambiguous by design.
				if len(fs) != 1 || fs[0].class == 'i' {
					continue
				}
				fn, err := b.LookupFunction(n, "")
				if err != nil || fn.Start != fs[0].addr || fn.End != fs[0].addr+fs[0].size || fn.Go {
					t.Errorf("LookupFunction(%s) = %+v, %v; nm says %#x size %#x", n, fn, err, fs[0].addr, fs[0].size)
				}
				checked++
			}
			if checked < 5 {
				t.Fatalf("only %d functions checked", checked)
			}
			if _, err := b.LookupFunction("no_such_function_anywhere", ""); !errors.Is(err, ErrNoFunction) {
				t.Errorf("missing function: %v, want ErrNoFunction", err)
			}
		})
	}
}

// TestLookupFunctionGo finds main's functions in Go builds, stripped, PIE and
// cgo included, against go tool nm on the unstripped twin and go tool
// addr2line on the binary itself.
func TestLookupFunctionGo(t *testing.T) {
	ws := builtWorkloads(t)
	for _, c := range []struct {
		name, twin string
		// Where go tool addr2line misreads the stripped PIE cgo build (see
		// TestSymbolizeGo), the twin's nm is the truth, with the layout
		// checked identical.
		truthFromTwin bool
	}{
		{"go", "go", true},
		{"go-stripped", "go", false},
		{"go-pie", "go-pie", true},
		{"go-pie-stripped", "go-pie", false},
		{"go-cgo-pie", "go-cgo-pie", true},
		{"go-cgo-pie-stripped", "go-cgo-pie", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, twin := ws[c.name], ws[c.twin]
			if c.truthFromTwin && c.name != c.twin {
				requireSameLayout(t, w.path, twin.path)
			}
			var funcs []nmFunc
			cFunc := ""
			for _, f := range goNMFunctions(t, twin.path) {
				if strings.HasPrefix(f.name, "main.") || f.name == "runtime.main" {
					funcs = append(funcs, f)
				}
				if strings.HasPrefix(f.name, "_cgo_") && strings.HasSuffix(f.name, "_Cfunc_cadd") {
					cFunc = f.name
				}
			}
			b := openWorkload(t, w.path)
			var starts []uint64
			for _, f := range funcs {
				fn, err := b.LookupFunction(f.name, "")
				if err != nil || !fn.Go || fn.End <= fn.Start {
					t.Fatalf("LookupFunction(%s) = %+v, %v", f.name, fn, err)
				}
				if c.truthFromTwin && (fn.Start != f.addr || fn.End < f.addr+f.size) {
					t.Errorf("LookupFunction(%s) = %#x-%#x; go tool nm says %#x size %d", f.name, fn.Start, fn.End, f.addr, f.size)
				}
				starts = append(starts, fn.Start, fn.Start-1)
			}
			if len(funcs) < 2 {
				t.Fatalf("go tool nm lists %d main functions", len(funcs))
			}
			if !c.truthFromTwin {
				// The start names the function; the byte before does not.
				got := addr2line(t, starts, "go", "tool", "addr2line", w.path)
				for i, f := range funcs {
					if got[2*i].function != f.name || got[2*i+1].function == f.name {
						t.Errorf("%s found at %#x; go tool addr2line names it %q and the byte before %q", f.name, starts[2*i], got[2*i].function, got[2*i+1].function)
					}
				}
			}
			if c.name == "go-cgo-pie" {
				// cgo's C side of cadd: found through .symtab, not Go code.
				fn, err := b.LookupFunction(cFunc, "")
				if cFunc == "" || err != nil || fn.Go {
					t.Errorf("C function %q in a cgo binary: %+v, %v", cFunc, fn, err)
				}
			}
		})
	}
}

// readelfFuncs lists the versioned FUNC symbols of lib's .dynsym:
// name -> "name@VER" or "name@@VER" -> value.
func readelfFuncs(t *testing.T, lib string) map[string]map[string]uint64 {
	out := run(t, "", "readelf", "--dyn-syms", "-W", lib)
	syms := map[string]map[string]uint64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || f[3] != "FUNC" || f[6] == "UND" || !strings.Contains(f[7], "@") {
			continue
		}
		v, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(f[7], "@")
		if syms[name] == nil {
			syms[name] = map[string]uint64{}
		}
		syms[name][f[7]] = v
	}
	return syms
}

// TestLookupFunctionVersioned resolves versioned libc functions against
// readelf: no version picks the default (@@) one, an explicit version picks
// its own, even hidden at another address.
func TestLookupFunctionVersioned(t *testing.T) {
	requireTools(t, "readelf")
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	testenv.RequireFile(t, libc, "libc6")
	syms := readelfFuncs(t, libc)
	b := openWorkload(t, libc)
	check := func(name, version string, want uint64) {
		t.Helper()
		fn, err := b.LookupFunction(name, version)
		if err != nil || fn.Start != want {
			t.Errorf("LookupFunction(%s, %q) = %+v, %v; readelf says %#x", name, version, fn, err, want)
		}
	}
	want, ok := syms["getaddrinfo"]["getaddrinfo@@GLIBC_2.2.5"]
	if !ok {
		t.Fatal("readelf shows no getaddrinfo@@GLIBC_2.2.5")
	}
	check("getaddrinfo", "", want)
	check("getaddrinfo", "GLIBC_2.2.5", want)
	if _, err := b.LookupFunction("getaddrinfo", "GLIBC_9.9"); !errors.Is(err, ErrNoFunction) {
		t.Errorf("a wrong version: %v", err)
	}
	// Functions whose hidden and default versions are different code.
	split := 0
	for name, versions := range syms {
		var def string
		for v := range versions {
			if strings.Contains(v, "@@") {
				def = v
			}
		}
		if def == "" || len(versions) < 2 {
			continue
		}
		for v, addr := range versions {
			if v != def && addr != versions[def] {
				check(name, "", versions[def])
				check(name, v[strings.LastIndexByte(v, '@')+1:], addr)
				split++
			}
		}
	}
	if split == 0 {
		t.Log("libc has no function whose versions differ in address")
	}
}

// TestLookupFunctionDemangled finds C++ functions by their demangled names,
// as c++filt prints them with and without parameters.
func TestLookupFunctionDemangled(t *testing.T) {
	requireTools(t, "c++filt")
	var bin string
	for _, w := range symtest.DWARFWorkloads(t, workloadDir) {
		if w.Name == "cpp-dwarf5" {
			bin = w.Path
		}
	}
	b := openWorkload(t, bin)
	var mangled []nmFunc
	for _, f := range nmFunctions(t, bin) {
		if strings.HasPrefix(f.name, "_ZN6bpfcol") && f.class != 'i' {
			mangled = append(mangled, f)
		}
	}
	if len(mangled) == 0 {
		t.Fatal("nm shows no bpfcol:: functions")
	}
	var in strings.Builder
	for _, f := range mangled {
		in.WriteString(f.name + "\n")
	}
	full := strings.Split(strings.TrimSpace(run(t, in.String(), "c++filt")), "\n")
	short := strings.Split(strings.TrimSpace(run(t, in.String(), "c++filt", "-p")), "\n")
	// A demangled name shared by several addresses (template instances
	// without parameters) is ambiguous by design.
	addrs := map[string]map[uint64]bool{}
	for i, f := range mangled {
		for _, n := range []string{full[i], short[i]} {
			if addrs[n] == nil {
				addrs[n] = map[uint64]bool{}
			}
			addrs[n][f.addr] = true
		}
	}
	checked := 0
	for i, f := range mangled {
		for _, n := range []string{full[i], short[i]} {
			if len(addrs[n]) != 1 {
				continue
			}
			fn, err := b.LookupFunction(n, "")
			if err != nil || fn.Start != f.addr {
				t.Errorf("LookupFunction(%q) = %+v, %v; nm says %s at %#x", n, fn, err, f.name, f.addr)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no unambiguous demangled name to check")
	}
	t.Logf("%d demangled names of %d functions resolved", checked, len(mangled))
}

// globalCXX has C++ functions of the global namespace: one name with one
// function, one overloaded, and a C one.
const globalCXX = `
#include <cstdio>
__attribute__((noinline)) int tally(int x) { return std::printf("%d", x); }
__attribute__((noinline)) int scale(int x) { return std::printf("%d", x * 2); }
__attribute__((noinline)) double scale(double x) { return std::printf("%f", x * 2); }
extern "C" __attribute__((noinline)) int plain_c(int x) { return std::printf("%d", x + 1); }
int main(int argc, char **) { return tally(argc) + scale(argc) + (int)scale(1.5) + plain_c(argc); }
`

// TestLookupFunctionGlobalCXX finds a C++ function of the global namespace
// by its bare name, as perf and gdb print it (tally for _Z5tallyi), where
// nm -C says it is; an overloaded bare name lists its candidates.
func TestLookupFunctionGlobalCXX(t *testing.T) {
	requireTools(t, "g++", "nm")
	dir := t.TempDir()
	src, bin := dir+"/global.cc", dir+"/global"
	if err := os.WriteFile(src, []byte(globalCXX), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "", "g++", "-O2", "-o", bin, src)
	addr := map[string]uint64{}
	for _, f := range nmFunctions(t, bin) {
		addr[f.name] = f.addr
	}
	b := openWorkload(t, bin)
	for name, mangled := range map[string]string{"tally": "_Z5tallyi", "plain_c": "plain_c"} {
		want, ok := addr[mangled]
		if !ok {
			t.Fatalf("nm does not list %s", mangled)
		}
		fn, err := b.LookupFunction(name, "")
		if err != nil || fn.Start != want || fn.Name != mangled {
			t.Errorf("LookupFunction(%s) = %+v, %v; nm says %s at %#x", name, fn, err, mangled, want)
		}
	}
	_, err := b.LookupFunction("scale", "")
	for _, mangled := range []string{"_Z5scalei", "_Z5scaled"} {
		if err == nil || !strings.Contains(err.Error(), mangled) || !strings.Contains(err.Error(), "several functions") {
			t.Errorf("LookupFunction(scale): %v; want an ambiguity listing %s", err, mangled)
		}
	}
	if _, err := b.LookupFunction("scal", ""); !errors.Is(err, ErrNoFunction) {
		t.Errorf("LookupFunction(scal): %v, want ErrNoFunction", err)
	}
}

// TestLookupFunctionSameLocalName looks up a static function that two
// source files define: the ambiguity lists both addresses nm shows, and
// says that no name picks one (both have the same symbol name).
func TestLookupFunctionSameLocalName(t *testing.T) {
	requireTools(t, "gcc", "nm")
	dir := t.TempDir()
	for name, src := range map[string]string{
		"a.c": "static __attribute__((noinline)) int helper(int x) { return x * 2; }\nint a(int x) { return helper(x); }\nint b(int);\nint main(int argc, char **argv) { return a(argc) + b(argc); }\n",
		"b.c": "static __attribute__((noinline)) int helper(int x) { return x * 3; }\nint b(int x) { return helper(x); }\n",
	} {
		if err := os.WriteFile(dir+"/"+name, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := dir + "/twice"
	run(t, "", "gcc", "-O2", "-o", bin, dir+"/a.c", dir+"/b.c")
	var addrs []uint64
	for _, f := range nmFunctions(t, bin) {
		if f.name == "helper" {
			addrs = append(addrs, f.addr)
		}
	}
	if len(addrs) != 2 {
		t.Fatalf("nm lists %d functions named helper, want 2", len(addrs))
	}
	_, err := openWorkload(t, bin).LookupFunction("helper", "")
	if err == nil {
		t.Fatal("helper resolved, want an ambiguity")
	}
	for _, a := range addrs {
		if !strings.Contains(err.Error(), "at 0x"+strconv.FormatUint(a, 16)+"]") {
			t.Errorf("%v: does not list helper at %#x", err, a)
		}
	}
	if !strings.Contains(err.Error(), "no name tells apart") {
		t.Errorf("%v: does not say that no name picks one", err)
	}
}
