package symbolize

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestLocalDebugMissRemembered: a build-id whose debug file no local
// directory holds is not searched for again at its next lookup (every new
// address of a stripped binary asks), so a file installed meanwhile is
// found only once the miss is forgotten: at once when a fetch brings it,
// else after the recheck (30 s).
func TestLocalDebugMissRemembered(t *testing.T) {
	// A program with DWARF stands for its own debug file.
	dir := t.TempDir()
	src, prog := filepath.Join(dir, "p.c"), filepath.Join(dir, "p")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(testenv.LookPath(t, "gcc"), "-g", "-Wl,--build-id", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := os.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := OpenBinary(f, NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	id := bin.BuildIDGNU()
	bin.Release()
	if len(id) < 3 {
		t.Fatalf("the program has no GNU build-id (%q)", id)
	}
	system := t.TempDir()
	s, err := NewSymbolizer(SymbolizerConfig{SystemDebugDir: system, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if dbg, pending := s.debugFile(id); dbg != nil || pending {
		t.Fatalf("empty debug directory: got a debug file (pending %v)", pending)
	}
	// Installed now: the miss is remembered.
	path := filepath.Join(system, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if dbg, _ := s.debugFile(id); dbg != nil {
		dbg.Release()
		t.Fatal("the directory was searched again right after a miss")
	}
	// Forgotten (as a fetch's success or the recheck does): found.
	s.files.Recheck(id)
	dbg, _ := s.debugFile(id)
	if dbg == nil {
		t.Fatal("the installed debug file was not found once the miss was forgotten")
	}
	dbg.Release()
}
