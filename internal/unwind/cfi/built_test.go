package cfi

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/stretchr/testify/require"
)

// build compiles sources (relative to testdata) into an executable with
// the given compiler and flags.
func build(t *testing.T, compiler, name string, flags []string, sources ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-o", out}, flags...)
	for _, s := range sources {
		args = append(args, filepath.Join("testdata", s))
	}
	cmd := exec.Command(compiler, args...)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v:\n%s", compiler, args, msg)
	return out
}

var optFlags = []string{"-O2", "-fomit-frame-pointer"}

// rulesIn returns the rows of tbl in force anywhere inside symbol sym.
func rulesIn(t *testing.T, path string, tbl *Table, sym string) []Row {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Name != sym {
			continue
		}
		first, _ := tbl.Lookup(s.Value)
		rows := []Row{first}
		for _, r := range tbl.Rows {
			if r.PC > s.Value && r.PC < s.Value+s.Size {
				rows = append(rows, r)
			}
		}
		return rows
	}
	require.FailNow(t, "no symbol "+sym, path)
	return nil
}

func compileFile(t *testing.T, path string, fn func(*elf.File) (*Table, error)) *Table {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	tbl, err := fn(f)
	require.NoError(t, err)
	return tbl
}

func hasRow(rows []Row, pred func(Row) bool) bool {
	for _, r := range rows {
		if pred(r) {
			return true
		}
	}
	return false
}

// TestBuiltEHFrame compares the tables of C and assembly built without
// frame pointers with readelf, and checks that every CFI form of
// testdata/forms.S reaches the table as the rule it means.
func TestBuiltEHFrame(t *testing.T) {
	bin := build(t, "gcc", "chain", optFlags, "chain.c", "forms.S")
	checkFile(t, bin, false, EHFrame, 0.1) // forms.S is mostly unsupported forms
	checkForms(t, bin, compileFile(t, bin, EHFrame))
}

// TestBuiltCXX covers 'zPLR' CIEs (personality, LSDA) of C++ with
// exceptions and templates.
func TestBuiltCXX(t *testing.T) {
	bin := build(t, "g++", "exc", optFlags, "exc.cc")
	checkFile(t, bin, false, EHFrame, 0.01)
}

// TestBuiltDebugFrame covers code with no .eh_frame of its own: CFI only
// in .debug_frame (-g without unwind tables). FromELF must fill
// .eh_frame's gaps (the C runtime's few FDEs) from .debug_frame.
func TestBuiltDebugFrame(t *testing.T) {
	flags := append([]string{"-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-DDEBUG_FRAME"}, optFlags...)
	bin := build(t, "gcc", "chain-debug", flags, "chain.c", "forms.S")
	checkFile(t, bin, true, DebugFrame, 0.1)
	checkForms(t, bin, compileFile(t, bin, DebugFrame))

	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	eh, err := EHFrame(f)
	if err == nil {
		require.True(t, NeedsDebugFrame(f, eh), ".eh_frame of the C runtime alone must not count as coverage")
	}
	full, err := FromELF(f)
	require.NoError(t, err)
	checkSorted(t, full)
	require.False(t, NeedsDebugFrame(f, full), "FromELF left the code uncovered")
	dbg := compileFile(t, bin, DebugFrame)
	for _, sym := range []string{"main", "f_state", "f_plt"} {
		got, want := rulesIn(t, bin, full, sym), rulesIn(t, bin, dbg, sym)
		require.Equal(t, want, got, "FromELF rules in %s", sym)
	}
}

// checkForms checks that each function of forms.S has the rules its
// directives mean (readelf agreement is checked by checkFile; this makes
// sure each form is present, so the comparison is not vacuous).
func checkForms(t *testing.T, bin string, tbl *Table) {
	t.Helper()
	cases := []struct {
		sym  string
		what string
		pred func(Row) bool
	}{
		{"f_state", "CFA from RBP", func(r Row) bool {
			return r.CFA == CFAFP && r.CFAOffset == 16 && r.FP == FPAtCFA && r.FPOffset == -16
		}},
		{"f_state", "RBP saved above the CFA", func(r Row) bool { return r.FP == FPAtCFA && r.FPOffset == 8 }},
		{"f_state", "a large CFA offset", func(r Row) bool { return r.CFA == CFAFP && r.CFAOffset == 100000 }},
		{"f_state", "CFA back on RSP after leave", func(r Row) bool { return r.CFA == CFASP && r.CFAOffset == 8 && r.FP == FPUnchanged }},
		{"f_plt", "PLT threshold 10", func(r Row) bool { return r.CFA == CFAPLT && r.PLTThreshold == 10 && r.CFAOffset == 8 }},
		{"f_plt", "PLT threshold 11", func(r Row) bool { return r.CFA == CFAPLT && r.PLTThreshold == 11 && r.CFAOffset == 8 }},
		{"f_plt", "another CFA expression", func(r Row) bool { return r.CFA == CFAUnsupported }},
		{"f_rbp", "RBP in a register or expression", func(r Row) bool { return r.CFA == CFASP && r.FP == FPUnsupported }},
		{"f_rbp", "CFA in r10", func(r Row) bool { return r.CFA == CFAUnsupported }},
		{"f_ra", "return address undefined", func(r Row) bool { return r.CFA == CFAEnd }},
		{"f_ra", "return address elsewhere", func(r Row) bool { return r.CFA == CFAUnsupported }},
		{"f_sigreturn", "signal frame", func(r Row) bool { return r.CFA == CFASignal }},
		{"f_pers", "personality CIE", func(r Row) bool { return r.CFA == CFASP && r.CFAOffset == 32 }},
	}
	for _, c := range cases {
		rows := rulesIn(t, bin, tbl, c.sym)
		require.True(t, hasRow(rows, c.pred), "%s: no row for %s in %+v", c.sym, c.what, rows)
	}
}

// TestNoSectionHeaders finds .eh_frame through PT_GNU_EH_FRAME
// (.eh_frame_hdr) in a binary stripped of its section headers.
func TestNoSectionHeaders(t *testing.T) {
	bin := build(t, "gcc", "chain", append([]string{"-Wl,--build-id"}, optFlags...), "chain.c", "forms.S")
	bare := bin + ".bare"
	tool := "llvm-objcopy-14"
	if _, err := exec.LookPath(tool); err != nil {
		tool = "llvm-objcopy"
	}
	out, err := exec.Command(tool, "--strip-sections", bin, bare).CombinedOutput()
	require.NoError(t, err, "%s: %s", tool, out)
	f, err := elf.Open(bare)
	require.NoError(t, err)
	defer f.Close()
	require.Nil(t, f.Section(".eh_frame"), "section headers stripped")

	got, err := EHFrame(f)
	require.NoError(t, err)
	require.Equal(t, compileFile(t, bin, EHFrame).Rows, got.Rows)
	orig, err := elf.Open(bin)
	require.NoError(t, err)
	defer orig.Close()
	require.NotEmpty(t, elfbin.GNUBuildID(f))
	require.Equal(t, elfbin.GNUBuildID(orig), elfbin.GNUBuildID(f), "build ID from PT_NOTE")
}

// TestBuiltGo covers Go's CFI: a compressed .debug_frame only.
func TestBuiltGo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gohello")
	cmd := exec.Command("go", "build", "-o", bin, filepath.Join("testdata", "gohello.go"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	s := f.Section(".debug_frame")
	require.NotNil(t, s)
	require.NotZero(t, s.Flags&elf.SHF_COMPRESSED, "Go compresses .debug_frame")
	_, err = EHFrame(f)
	require.ErrorIs(t, err, ErrNoCFI)
	checkFile(t, bin, true, DebugFrame, 0.01)
	full, err := FromELF(f)
	require.NoError(t, err)
	require.Equal(t, compileFile(t, bin, DebugFrame).Rows, full.Rows)
}
