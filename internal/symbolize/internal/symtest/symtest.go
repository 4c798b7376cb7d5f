// Package symtest builds the DWARF workloads and finds the debug files
// the tests of the symbolizer and of its sub-packages read. Tests only.
package symtest

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// DWARFWorkload is one binary with DWARF for the accuracy tests.
type DWARFWorkload struct {
	Name string
	Path string
	// Truth is the binary llvm-symbolizer reads: LLVM 14 cannot decompress
	// zstd sections, so the zstd copy is checked against its uncompressed
	// original, which has the same layout.
	Truth string
}

var (
	dwarfOnce      sync.Once
	dwarfWorkloads []DWARFWorkload
	dwarfErr       error
)

// testdata is the symbolizer's testdata directory, where the workloads'
// sources are.
func testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata")
}

// DWARFWorkloads builds the inlining C and C++ workloads in DWARF 4 and 5,
// with zlib and zstd compressed sections, into dir, once per test process.
func DWARFWorkloads(tb testing.TB, dir string) []DWARFWorkload {
	tb.Helper()
	for _, tool := range []string{"gcc", "g++", "objcopy"} {
		testenv.LookPath(tb, tool)
	}
	dwarfOnce.Do(func() {
		csrc := filepath.Join(testdata(), "cinline", "main.c")
		cppsrc := filepath.Join(testdata(), "cppworkload", "main.cpp")
		builds := [][]string{
			{"c-dwarf5", "gcc", "-O2", "-g", "-gdwarf-5", "-o", "c-dwarf5", csrc},
			{"c-dwarf4", "gcc", "-O2", "-g", "-gdwarf-4", "-no-pie", "-o", "c-dwarf4", csrc},
			{"c-zlib", "gcc", "-O2", "-g", "-gz=zlib", "-o", "c-zlib", csrc},
			{"c-zstd", "objcopy", "--compress-debug-sections=zstd", "c-dwarf5", "c-zstd"},
			{"c-zdebug", "objcopy", "--compress-debug-sections=zlib-gnu", "c-dwarf4", "c-zdebug"},
			{"cpp-dwarf5", "g++", "-O2", "-g", "-o", "cpp-dwarf5", cppsrc},
			{"cpp-dwarf4", "g++", "-O2", "-g", "-gdwarf-4", "-o", "cpp-dwarf4", cppsrc},
		}
		for _, b := range builds {
			cmd := exec.Command(b[1], b[2:]...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				dwarfErr = fmt.Errorf("building %s: %v\n%s", b[0], err, out)
				return
			}
			w := DWARFWorkload{Name: b[0], Path: filepath.Join(dir, b[0])}
			w.Truth = w.Path
			if b[0] == "c-zstd" {
				w.Truth = filepath.Join(dir, "c-dwarf5")
			}
			dwarfWorkloads = append(dwarfWorkloads, w)
		}
	})
	if dwarfErr != nil {
		tb.Fatal(dwarfErr)
	}
	return dwarfWorkloads
}

// LibcDebugFile returns the path of the installed libc's separate debug
// file (libc6-dbg) and its symbol table.
func LibcDebugFile(tb testing.TB) (string, []elf.Symbol) {
	tb.Helper()
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := os.Open(libc)
	if err != nil {
		tb.Fatalf("libc6 is needed: %v", err)
	}
	b, err := elfbin.Open(f)
	if err != nil {
		tb.Fatal(err)
	}
	id := b.IDs.GNU
	b.Close()
	if len(id) < 3 {
		tb.Fatalf("%s has no build id", libc)
	}
	dbg := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	ef, err := elf.Open(dbg)
	if err != nil {
		tb.Fatalf("libc6-dbg is needed (scripts/install-deps.sh installs it): %v", err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		tb.Fatal(err)
	}
	return dbg, syms
}

// FuzzAddresses are looked up in every fuzzed input: low addresses,
// typical non-PIE and PIE text addresses, and the extremes.
var FuzzAddresses = []uint64{0, 1, 0x1000, 0x1139, 0x401000, 0x401139, 1<<63 - 1, ^uint64(0)}

// MaxFuzzInput keeps inputs ELF-sized: larger ones only slow the fuzzer.
const MaxFuzzInput = 1 << 20

// Main runs the tests of m with *dir a directory of their own for the
// workloads they build, removed after, and returns their exit code.
func Main(m *testing.M, prefix string, dir *string) int {
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating workload dir:", err)
		return 1
	}
	*dir = d
	defer os.RemoveAll(d)
	return m.Run()
}
