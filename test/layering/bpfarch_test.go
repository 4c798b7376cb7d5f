package layering

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// archHeader is the one BPF source that says what differs between x86-64
// and arm64 (docs/ARCHITECTURE.md): every other one names its macros.
const archHeader = "bpfcol_arch.h"

// bpfArchTest matches a line of BPF C that tests the target architecture.
var bpfArchTest = regexp.MustCompile(`__TARGET_ARCH_|__x86_64__|__aarch64__|\bbpf_target_(?:x86|arm64)\b`)

// bpfArchLines returns the numbers of the lines of src that test the
// target architecture. Comment lines are skipped.
func bpfArchLines(src []byte) []int {
	var lines []int
	for i, line := range bytes.Split(src, []byte("\n")) {
		trimmed := bytes.TrimSpace(line)
		if bytes.HasPrefix(trimmed, []byte("//")) || bytes.HasPrefix(trimmed, []byte("*")) || bytes.HasPrefix(trimmed, []byte("/*")) {
			continue
		}
		if bpfArchTest.Match(trimmed) {
			lines = append(lines, i+1)
		}
	}
	return lines
}

// TestBPFArchOnlyInArchHeader checks that no BPF source but bpfcol_arch.h
// tests the architecture it is built for.
func TestBPFArchOnlyInArchHeader(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "internal", "bpf", "c", "*.c"))
	if err != nil {
		t.Fatal(err)
	}
	headers, _ := filepath.Glob(filepath.Join("..", "..", "internal", "bpf", "c", "include", "*.h"))
	files = append(files, headers...)
	sawHeader := false
	for _, f := range files {
		if filepath.Base(f) == archHeader {
			sawHeader = true
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range bpfArchLines(src) {
			t.Errorf("%s:%d tests the target architecture: name a macro of %s", f, n, archHeader)
		}
	}
	if !sawHeader || len(files) < 5 {
		t.Errorf("read %d BPF sources, %s among them: %v", len(files), archHeader, sawHeader)
	}
}

// TestBPFArchCheckCatchesALeak proves the check can fail.
func TestBPFArchCheckCatchesALeak(t *testing.T) {
	for _, line := range []string{
		`#if defined(__TARGET_ARCH_arm64)`,
		`#ifdef __x86_64__`,
		`	u64 lr = ctx->regs[30]; /* __aarch64__ */`,
	} {
		src := []byte("// a BPF source\n" + line + "\n")
		if got := bpfArchLines(src); len(got) != 1 || got[0] != 2 {
			t.Errorf("%s: reported at lines %v, want 2", line, got)
		}
	}
	if got := bpfArchLines([]byte("// __TARGET_ARCH_x86 in a comment\n")); len(got) != 0 {
		t.Errorf("a comment reported at lines %v", got)
	}
}
