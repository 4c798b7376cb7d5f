//go:build linux

package symbolize

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
)

// TestOpenDebugFile finds a debug file by build ID in a configured debug
// directory, and refuses build IDs that are no lowercase hex.
func TestOpenDebugFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "main")
	run(t, "", "gcc", "-g", "-Wl,--build-id", "-o", bin, src)
	id := gnuBuildID(t, bin)
	debugDir := t.TempDir()
	dbg := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dbg), 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, "", "objcopy", "--only-keep-debug", bin, dbg)

	s, err := NewSymbolizer(SymbolizerConfig{
		SystemDebugDir:   t.TempDir(),
		DebugDirectories: []string{debugDir},
		Getenv:           func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	f, pending, err := s.OpenDebugFile(id)
	if err != nil || pending {
		t.Fatalf("OpenDebugFile(%s) = pending %v, %v", id, pending, err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(dbg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("OpenDebugFile opened another file than the debug directory's")
	}

	// Not on disk, and no debuginfod configured: neither a file nor pending.
	// The first digit changed, so never the real id.
	other := "0" + id[1:]
	if id[0] == '0' {
		other = "1" + id[1:]
	}
	if _, pending, err := s.OpenDebugFile(other); pending || !errors.Is(err, ErrNoDebugFile) {
		t.Fatalf("OpenDebugFile(%s) = pending %v, %v; want ErrNoDebugFile", other, pending, err)
	}
	for _, bad := range []string{"", "../../etc/passwd", "ABCD", id[:2]} {
		if _, _, err := s.OpenDebugFile(bad); !errors.Is(err, debuginfod.ErrInvalidBuildID) {
			t.Fatalf("OpenDebugFile(%q) = %v; want ErrInvalidBuildID", bad, err)
		}
	}
}
