//go:build linux

package symbolize

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/process"
)

// expectedAlias picks, among nm symbols sharing an address, the one the
// symbolizer documents: global, then weak, then local; then larger size;
// then smaller name.
func expectedAlias(cands []nmFunc) nmFunc {
	rank := func(c byte) int {
		switch c {
		case 'T', 'i':
			return 0
		case 'W', 'w', 'V', 'v':
			return 1
		case 't':
			return 2
		}
		return 3
	}
	return slices.MinFunc(cands, func(a, b nmFunc) int {
		if r := rank(a.class) - rank(b.class); r != 0 {
			return r
		}
		if a.size != b.size {
			if a.size > b.size {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
}

func TestSymbolizeC(t *testing.T) {
	ws := builtWorkloads(t)
	for _, name := range []string{"c-pie", "c-nopie"} {
		t.Run(name, func(t *testing.T) {
			w := ws[name]
			// addr2line on a copy without DWARF answers from .symtab, the
			// table this layer reads; DWARF names (and clones' base names)
			// come with the DWARF layer.
			nodebug := w.path + ".nodebug"
			run(t, "", "objcopy", "--strip-debug", w.path, nodebug)

			funcs := nmFunctions(t, w.path)
			byAddr := map[uint64][]nmFunc{}
			for _, f := range funcs {
				byAddr[f.addr] = append(byAddr[f.addr], f)
			}
			addrs := sampleAddresses(funcs, 8)
			want := addr2line(t, addrs, "addr2line", "-f", "-e", nodebug)
			// The symbol table layer alone: DWARF is checked by
			// TestDWARFAgainstLLVMSymbolizer.
			b := openWorkload(t, nodebug)
			if b.IsGo() {
				t.Error("IsGo() = true for a C binary")
			}
			for i, addr := range addrs {
				frames, ok := b.Symbolize(addr)
				if !ok || len(frames) != 1 {
					t.Errorf("Symbolize(%#x) = %v, %v; addr2line says %q", addr, frames, ok, want[i].function)
					continue
				}
				if frames[0].Name != want[i].function {
					t.Errorf("Symbolize(%#x) = %q, addr2line says %q", addr, frames[0].Name, want[i].function)
				}
			}
			// Aliases and function ranges, from nm.
			sawAlias := false
			for addr, cands := range byAddr {
				exp := expectedAlias(cands)
				sawAlias = sawAlias || len(cands) > 1
				frames, ok := b.Symbolize(addr)
				if !ok || frames[0].Name != exp.name {
					t.Errorf("Symbolize(%#x) = %v, %v; want %q among %v", addr, frames, ok, exp.name, cands)
				}
				size := slices.MaxFunc(cands, func(a, b nmFunc) int { return int(a.size) - int(b.size) }).size
				start, end, ok := b.FunctionStart(addr + size/2)
				if !ok || start != addr || end != addr+max(size, 1) {
					t.Errorf("FunctionStart(%#x) = %#x, %#x, %v; want %#x, %#x", addr+size/2, start, end, ok, addr, addr+max(size, 1))
				}
				// Never stretched: the byte after a symbol belongs to it
				// only if another symbol starts there.
				next := addr + max(size, 1)
				if _, starts := byAddr[next]; !starts && !coveredByAny(funcs, next) {
					if frames, ok := b.Symbolize(next); ok {
						t.Errorf("Symbolize(%#x) past the end of %q = %v, want not ok", next, exp.name, frames)
					}
				}
			}
			if !sawAlias {
				t.Error("the C workload's weak alias is missing from nm's output")
			}
		})
	}
}

func coveredByAny(funcs []nmFunc, addr uint64) bool {
	for _, f := range funcs {
		if addr == f.addr || (addr > f.addr && addr-f.addr < f.size) {
			return true
		}
	}
	return false
}

func TestSymbolizeGo(t *testing.T) {
	ws := builtWorkloads(t)
	// Addresses come from the unstripped twin's symbol table; a stripped
	// build need not share its layout, so each binary is normally checked
	// against go tool addr2line on itself. Not the stripped PIE cgo build:
	// there go tool addr2line bases .gopclntab at the .text section instead
	// of runtime.text and answers wrongly, so the truth comes from the twin,
	// valid only because its code layout is identical (checked).
	for _, c := range []struct {
		name, twin    string
		truthFromTwin bool
	}{
		{"go", "go", false},
		{"go-stripped", "go", false},
		{"go-pie", "go-pie", false},
		{"go-pie-stripped", "go-pie", false},
		{"go-cgo-pie", "go-cgo-pie", false},
		{"go-cgo-pie-stripped", "go-cgo-pie", true},
	} {
		name, unstripped := c.name, c.twin
		t.Run(name, func(t *testing.T) {
			w, twin := ws[name], ws[unstripped]
			truth := w.path
			if c.truthFromTwin {
				requireSameLayout(t, w.path, twin.path)
				truth = twin.path
			}
			funcs := goNMFunctions(t, twin.path)
			addrs := sampleAddresses(funcs, 4)
			want := addr2line(t, addrs, "go", "tool", "addr2line", truth)
			b := openWorkload(t, w.path)
			if !b.IsGo() {
				t.Fatal("IsGo() = false for a Go binary")
			}
			if err := b.SymbolsErr(); err != nil {
				t.Fatal(err)
			}
			known, workloadFuncs := 0, 0
			for i, addr := range addrs {
				if want[i].function == "?" {
					continue
				}
				known++
				if strings.HasPrefix(want[i].function, "main.") {
					workloadFuncs++
				}
				frames, ok := b.Symbolize(addr)
				if !ok || len(frames) == 0 {
					t.Errorf("Symbolize(%#x) = not ok; go tool addr2line says %+v", addr, want[i])
					continue
				}
				// go tool addr2line names the physical function with the
				// innermost position.
				leaf, physical := frames[0], frames[len(frames)-1]
				if physical.Name != want[i].function || leaf.File != want[i].file || leaf.Line != want[i].line {
					t.Errorf("Symbolize(%#x) = %+v; go tool addr2line says %+v", addr, frames, want[i])
				}
			}
			if known < len(addrs)*9/10 || workloadFuncs == 0 {
				t.Errorf("go tool addr2line resolved only %d of %d addresses (%d in main)", known, len(addrs), workloadFuncs)
			}
			if name == unstripped {
				for _, f := range funcs {
					if f.size == 0 {
						continue
					}
					start, end, ok := b.FunctionStart(f.addr + f.size - 1)
					if !ok || start != f.addr || end < f.addr+f.size {
						t.Errorf("FunctionStart(%#x) in %s = %#x, %#x, %v; want start %#x", f.addr+f.size-1, f.name, start, end, ok, f.addr)
					}
				}
			}
		})
	}
}

// requireSameLayout fails unless both binaries have the same instructions
// at the same addresses in .text, as objdump disassembles them. Operands
// are ignored: stripping shifts read-only data, which changes displacements
// but not where functions and instructions are.
func requireSameLayout(t *testing.T, a, b string) {
	t.Helper()
	requireTools(t, "objdump")
	layout := func(bin string) []string {
		var insns []string
		out := run(t, "", "objdump", "-d", "--no-show-raw-insn", "-j", ".text", bin)
		for _, line := range strings.Split(out, "\n") {
			addr, insn, ok := strings.Cut(line, ":\t")
			if !ok || strings.TrimSpace(addr) == "" || strings.ContainsAny(strings.TrimSpace(addr), " <") {
				continue
			}
			mnemonic, _, _ := strings.Cut(strings.TrimSpace(insn), " ")
			insns = append(insns, strings.TrimSpace(addr)+" "+mnemonic)
		}
		if len(insns) == 0 {
			t.Fatalf("objdump shows no instructions in %s", bin)
		}
		return insns
	}
	la, lb := layout(a), layout(b)
	if !slices.Equal(la, lb) {
		t.Fatalf("the code layout of %s and %s differs", a, b)
	}
}

// readelfBuildID returns the GNU build id readelf shows, "" if none.
func readelfBuildID(t *testing.T, bin string) string {
	for _, line := range strings.Split(run(t, "", "readelf", "-n", bin), "\n") {
		if _, id, ok := strings.Cut(line, "Build ID: "); ok {
			return strings.TrimSpace(id)
		}
	}
	return ""
}

func TestBuildIDs(t *testing.T) {
	for name, w := range builtWorkloads(t) {
		t.Run(name, func(t *testing.T) {
			b := openWorkload(t, w.path)
			if got, want := b.BuildIDGNU(), readelfBuildID(t, w.path); got != want {
				t.Errorf("BuildIDGNU() = %q, readelf says %q", got, want)
			}
			wantGo := ""
			if w.isGo {
				wantGo = strings.TrimSpace(run(t, "", "go", "tool", "buildid", w.path))
				if wantGo == "" {
					t.Fatal("go tool buildid printed nothing")
				}
			}
			if got := b.BuildIDGo(); got != wantGo {
				t.Errorf("BuildIDGo() = %q, go tool buildid says %q", got, wantGo)
			}
			if b.IsGo() != w.isGo {
				t.Errorf("IsGo() = %v, want %v", b.IsGo(), w.isGo)
			}
		})
	}
}

// sectionAddr returns a section's address as readelf shows it.
func sectionAddr(t *testing.T, bin, section string) uint64 {
	for _, line := range strings.Split(run(t, "", "readelf", "-SW", bin), "\n") {
		f := strings.Fields(strings.TrimSpace(line[min(len(line), strings.IndexByte(line, ']')+1):]))
		if len(f) >= 3 && f[0] == section {
			addr, err := strconv.ParseUint(f[2], 16, 64)
			if err != nil {
				t.Fatalf("parsing readelf line %q: %v", line, err)
			}
			return addr
		}
	}
	t.Fatalf("readelf shows no %s in %s", section, bin)
	return 0
}

func TestReadCode(t *testing.T) {
	for name, w := range builtWorkloads(t) {
		t.Run(name, func(t *testing.T) {
			dump := w.path + ".text.bin"
			run(t, "", "objcopy", "-O", "binary", "--only-section=.text", w.path, dump)
			text, err := os.ReadFile(dump)
			if err != nil {
				t.Fatal(err)
			}
			textAddr := sectionAddr(t, w.path, ".text")
			b := openWorkload(t, w.path)
			for _, off := range []int{0, 1, len(text) / 3, len(text) - 64, len(text) - 5} {
				got, err := b.ReadCode(textAddr+uint64(off), 64)
				if err != nil {
					t.Fatalf("ReadCode(%#x): %v", textAddr+uint64(off), err)
				}
				want := text[off:min(off+64, len(text))]
				if len(got) < len(want) || string(got[:len(want)]) != string(want) {
					t.Errorf("ReadCode(%#x) = %x, objcopy says %x", textAddr+uint64(off), got, want)
				}
			}
			if _, err := b.ReadCode(^uint64(0)-16, 8); err == nil {
				t.Error("ReadCode at the top of the address space succeeded")
			}
		})
	}
}

func TestFileIDOf(t *testing.T) {
	requireTools(t, "stat")
	path := builtWorkloads(t)["c-pie"].path
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := fileKeyOf(fi)
	if !ok {
		t.Fatal("FileIDOf(os.Stat) = not ok")
	}
	var dev, ino uint64
	out := run(t, "", "stat", "-c", "%d %i", path)
	if _, err := fmt.Sscan(out, &dev, &ino); err != nil {
		t.Fatalf("parsing stat output %q: %v", out, err)
	}
	if key != (process.FileKey{Dev: dev, Ino: ino}) {
		t.Errorf("FileKeyOf = %+v, stat says dev %d ino %d", key, dev, ino)
	}
}

// TestAddressMapperProcess runs the C workload, which prints the runtime
// addresses of its functions, and maps them back through /proc/PID/maps.
func TestAddressMapperProcess(t *testing.T) {
	ws := builtWorkloads(t)
	for _, name := range []string{"c-pie", "c-nopie"} {
		t.Run(name, func(t *testing.T) {
			w := ws[name]
			nmAddr := map[string]uint64{}
			for _, f := range nmFunctions(t, w.path) {
				nmAddr[f.name] = f.addr
			}
			cmd := exec.Command(w.path, "spin")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
			})
			runtimeAddr := map[string]uint64{}
			sc := bufio.NewScanner(stdout)
			for sc.Scan() && sc.Text() != "ready" {
				fn, addr, ok := strings.Cut(sc.Text(), " ")
				v, err := strconv.ParseUint(strings.TrimPrefix(addr, "0x"), 16, 64)
				if !ok || err != nil {
					t.Fatalf("parsing workload output %q: %v", sc.Text(), err)
				}
				runtimeAddr[fn] = v
			}
			if err := sc.Err(); err != nil {
				t.Fatalf("reading workload output: %v", err)
			}
			if len(runtimeAddr) == 0 {
				t.Fatal("workload printed no addresses")
			}
			maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			b := openWorkload(t, w.path)
			for fn, addr := range runtimeAddr {
				fileOff, ok := fileOffsetInMaps(t, string(maps), w.path, addr)
				if !ok {
					t.Errorf("%s at %#x: no mapping of %s holds it:\n%s", fn, addr, w.path, maps)
					continue
				}
				vaddr, ok := b.Mapper().FileOffsetToVirtualAddress(fileOff)
				if !ok || vaddr != nmAddr[fn] {
					t.Errorf("%s: FileOffsetToVirtualAddress(%#x) = %#x, %v; nm says %#x", fn, fileOff, vaddr, ok, nmAddr[fn])
					continue
				}
				if frames, ok := b.Symbolize(vaddr); !ok || frames[len(frames)-1].Name != fn {
					t.Errorf("Symbolize(%#x) = %v, %v; want %s", vaddr, frames, ok, fn)
				}
			}
		})
	}
}

// fileOffsetInMaps finds the mapping of path holding addr and returns
// addr - start + pgoff.
func fileOffsetInMaps(t *testing.T, maps, path string, addr uint64) (uint64, bool) {
	for _, line := range strings.Split(maps, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != path {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		pgoff, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("parsing maps line %q", line)
		}
		if addr >= start && addr < end {
			return addr - start + pgoff, true
		}
	}
	return 0, false
}
