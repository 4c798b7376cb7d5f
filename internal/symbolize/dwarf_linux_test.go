//go:build linux

package symbolize

import (
	"debug/elf"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// dwarfWorkload is one binary with DWARF for the accuracy tests.
type dwarfWorkload struct {
	name string
	path string
	// truth is the binary llvm-symbolizer reads: LLVM 14 cannot decompress
	// zstd sections, so the zstd copy is checked against its uncompressed
	// original, which has the same layout.
	truth string
}

var (
	dwarfOnce      sync.Once
	dwarfWorkloads []dwarfWorkload
	dwarfErr       error
)

// builtDWARFWorkloads builds the inlining C and C++ workloads in DWARF 4
// and 5, with zlib and zstd compressed sections, once per test process.
func builtDWARFWorkloads(tb testing.TB) []dwarfWorkload {
	tb.Helper()
	requireTools(tb, "gcc", "g++", "objcopy")
	dwarfOnce.Do(func() {
		csrc, _ := filepath.Abs("testdata/cinline/main.c")
		cppsrc, _ := filepath.Abs("testdata/cppworkload/main.cpp")
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
			cmd.Dir = workloadDir
			if out, err := cmd.CombinedOutput(); err != nil {
				dwarfErr = fmt.Errorf("building %s: %v\n%s", b[0], err, out)
				return
			}
			w := dwarfWorkload{name: b[0], path: filepath.Join(workloadDir, b[0])}
			w.truth = w.path
			if b[0] == "c-zstd" {
				w.truth = filepath.Join(workloadDir, "c-dwarf5")
			}
			dwarfWorkloads = append(dwarfWorkloads, w)
		}
	})
	if dwarfErr != nil {
		tb.Fatal(dwarfErr)
	}
	return dwarfWorkloads
}

// llvmSymbolizer finds llvm-symbolizer, skipping the test without it.
func llvmSymbolizer(tb testing.TB) string {
	tb.Helper()
	return testenv.LookPath(tb, "llvm-symbolizer", "llvm-symbolizer-14")
}

// llvmFrames runs llvm-symbolizer once over addrs and returns its frames
// per address, innermost first, with "??" turned into empty fields. The
// physical function is named by its linkage name, which for code without
// DW_AT_linkage_name (Go) is the ELF symbol's.
func llvmFrames(tb testing.TB, bin string, addrs []uint64) [][]frame.Line {
	return llvmFramesNamed(tb, bin, addrs, "linkage")
}

// llvmFramesNamed is llvmFrames with llvm-symbolizer's --functions mode:
// "short" names every frame by its DW_AT_name.
func llvmFramesNamed(tb testing.TB, bin string, addrs []uint64, functions string) [][]frame.Line {
	tb.Helper()
	var in strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	out := run(tb, in.String(), llvmSymbolizer(tb), "--obj="+bin, "--functions="+functions, "--inlining", "--demangle")
	res, err := parseLLVMSymbolizer(out, len(addrs))
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// textAddresses returns every address of .text when it is small, else n
// deterministic random ones.
func textAddresses(tb testing.TB, bin string, n int) []uint64 {
	tb.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	text := f.Section(".text")
	if text == nil {
		tb.Fatalf("%s has no .text", bin)
	}
	var addrs []uint64
	if text.Size <= uint64(n) {
		for a := text.Addr; a < text.Addr+text.Size; a++ {
			addrs = append(addrs, a)
		}
		return addrs
	}
	rng := rand.New(rand.NewPCG(uint64(text.Size), 7))
	for range n {
		addrs = append(addrs, text.Addr+rng.Uint64N(text.Size))
	}
	return addrs
}

// accuracy compares Symbolize with llvm-symbolizer over addrs. It returns
// how many addresses were compared and the misses. Addresses where
// llvm-symbolizer stretches a zero-size symbol past its start are left out
// and counted in stretched: bpfcol never does that, by design. The bound on
// what may be left out comes from the ELF symbol table, independent of
// both symbolizers: only an address that no sized function symbol covers
// (the crtstuff helpers GCC emits with size 0, for example) can be one
// llvm-symbolizer stretches over; any other is compared, so a regression
// that names nothing inside a real function counts as a miss. gaps counts
// the addresses of addrs outside every sized function.
func accuracy(tb testing.TB, b *Binary, truth string, addrs []uint64) (compared, stretched, gaps int, misses []string) {
	want := llvmFrames(tb, truth, addrs)
	zeroSize := map[string]uint64{}
	var sized []nmFunc
	for _, f := range nmFunctions(tb, truth) {
		if f.size == 0 {
			zeroSize[f.name] = f.addr
		} else {
			sized = append(sized, f)
		}
	}
	inSized := func(a uint64) bool {
		for _, f := range sized {
			if a >= f.addr && a-f.addr < f.size {
				return true
			}
		}
		return false
	}
	for i, a := range addrs {
		gap := !inSized(a)
		if gap {
			gaps++
		}
		got, _ := b.Symbolize(a)
		if gap && len(got) == 0 && len(want[i]) == 1 {
			if start, ok := zeroSize[want[i][0].Name]; ok && a > start {
				stretched++
				continue
			}
		}
		compared++
		if !framesEqual(got, want[i]) {
			misses = append(misses, fmt.Sprintf("%s %#x: %s", filepath.Base(b.f.OS.Name()), a, framesDiff(got, want[i])))
		}
	}
	return compared, stretched, gaps, misses
}

// framesEqual compares frames field by field. The one normalisation: LLVM
// 14's demangler writes "> >" where newer demanglers (and bpfcol's) write
// ">>"; both are the same C++ type.
func framesEqual(a, b []frame.Line) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		// Our raw name must be the one Function was demangled from;
		// llvm-symbolizer prints only the demangled form.
		if x.SystemName != "" && demangleName(x.SystemName) != x.Name {
			return false
		}
		x.SystemName = ""
		// LLVM 14 leaves some names it cannot demangle mangled.
		if strings.HasPrefix(y.Name, "_Z") && demangleName(y.Name) == x.Name {
			y.Name = x.Name
		}
		x.Name, y.Name = closeTemplates(x.Name), closeTemplates(y.Name)
		// LLVM joins Go's "." compilation and include directories onto
		// "<autogenerated>" without cleaning the path.
		y.File = strings.TrimPrefix(y.File, "././")
		if x != y {
			return false
		}
	}
	return true
}

// TestDWARFAgainstLLVMSymbolizer checks function, file:line and the inline
// chain against llvm-symbolizer over every .text byte of the C and C++
// workloads (DWARF 4 and 5, zlib and zstd sections) and random addresses of
// this test binary, a large Go program. At least 99.9% must be identical.
func TestDWARFAgainstLLVMSymbolizer(t *testing.T) {
	var total int
	var misses []string
	sawInline := false
	for _, w := range builtDWARFWorkloads(t) {
		b := openWorkload(t, w.path)
		if err := b.DWARFErr(); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		addrs := textAddresses(t, w.path, 40000)
		n, stretched, gaps, m := accuracy(t, b, w.truth, addrs)
		total += n
		misses = append(misses, m...)
		t.Logf("%s: %d of %d addresses (%.1f%%) left out where llvm-symbolizer stretches a zero-size symbol; %d (%.1f%%) lie outside every sized function",
			w.name, stretched, len(addrs), 100*float64(stretched)/float64(len(addrs)), gaps, 100*float64(gaps)/float64(len(addrs)))
		requireAccuracy(t, w.name, n, len(m))
		for _, a := range addrs {
			if fr, _ := b.Symbolize(a); len(fr) >= 3 {
				sawInline = true
				break
			}
		}
		t.Logf("%s: %d addresses, %d misses", w.name, n, len(m))
	}
	if !sawInline {
		t.Error("no address has an inline chain of depth 3: the workloads no longer inline")
	}
	// The large binary: the ebpfprof receiver and the collector it links,
	// built as a test binary (which keeps its DWARF).
	self := filepath.Join(workloadDir, "ebpfprofreceiver.test")
	if _, err := os.Stat(self); err != nil {
		run(t, "", "go", "test", "-c", "-o", self, "github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver")
	}
	big := openWorkload(t, self)
	// Go binaries answer from .gopclntab; check the DWARF reader directly,
	// its names as DWARF gives them (DW_AT_name: Go emits no linkage
	// names, so llvm-symbolizer's linkage mode would name the physical
	// function from the symbol table, ".abi0" suffixes and all).
	big.loadDWARF()
	if big.dwarf == nil {
		t.Fatalf("test binary DWARF: %v", big.dwarfErr)
	}
	goAddrs := textAddresses(t, self, 20000)
	want := llvmFramesNamed(t, self, goAddrs, "short")
	goMisses := 0
	for i, a := range goAddrs {
		got, _ := big.dwarf.lookup(a)
		if !framesEqual(got, want[i]) {
			goMisses++
			misses = append(misses, fmt.Sprintf("ebpfprofreceiver.test %#x: %s", a, framesDiff(got, want[i])))
		}
	}
	t.Logf("ebpfprofreceiver.test: %d addresses, %d misses", len(goAddrs), goMisses)
	requireAccuracy(t, "ebpfprofreceiver.test", len(goAddrs), goMisses)
	total += len(goAddrs)
	for i, m := range misses {
		if i%40 != 0 {
			continue
		}
		if i == 2000 {
			t.Logf("... %d more", len(misses)-20)
			break
		}
		t.Log("miss: " + m)
	}
	rate := 1 - float64(len(misses))/float64(total)
	t.Logf("accuracy: %d of %d identical (%.4f%%)", total-len(misses), total, 100*rate)
	if total < 10000 {
		t.Errorf("only %d addresses compared, want at least 10000", total)
	}
	if rate < 0.999 {
		t.Errorf("accuracy %.4f%% below 99.9%%", 100*rate)
	}
}

// requireAccuracy fails t unless at least 99.9% of one build's compared
// addresses are identical: pooled over all builds, a regression that hits
// one small build would vanish in the total.
func requireAccuracy(t *testing.T, build string, compared, misses int) {
	t.Helper()
	if compared == 0 {
		t.Errorf("%s: no address compared", build)
		return
	}
	if rate := 1 - float64(misses)/float64(compared); rate < 0.999 {
		t.Errorf("%s: accuracy %.4f%% (%d misses of %d) below 99.9%%", build, 100*rate, misses, compared)
	}
}

// framesDiff describes the first difference between got and want.
func framesDiff(got, want []frame.Line) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d frames %v, llvm-symbolizer %d frames %v", len(got), got, len(want), want)
	}
	for i := range got {
		if !framesEqual(got[i:i+1], want[i:i+1]) {
			return fmt.Sprintf("frame %d of %d: got %+v, llvm-symbolizer %+v", i, len(got), got[i], want[i])
		}
	}
	return "equal"
}

// closeTemplates undoes two spellings of LLVM 14's demangler: "> >" for
// nested template closers, and "operator<<char" (sic) for the template
// operator< <char>.
func closeTemplates(s string) string {
	for strings.Contains(s, "> >") {
		s = strings.ReplaceAll(s, "> >", ">>")
	}
	return strings.ReplaceAll(s, "operator< <", "operator<<")
}
