package elfbin

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// isGoFile opens path and says what IsGo says of it.
func isGoFile(t *testing.T, path string) (bool, BuildIDs) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	ids := ReadBuildIDs(ef, f)
	return IsGo(ef, ids), ids
}

// TestIsGo tells Go binaries from C ones: a Go binary stripped of its
// symbols, and one whose section headers are gone too (only its Go build
// id note, in a segment, says so), are Go; a C binary is not.
func TestIsGo(t *testing.T) {
	stripped := testworkload.BuildGo(t, "gohog", "-ldflags=-s -w")
	if goBin, ids := isGoFile(t, stripped); !goBin || ids.Go == "" {
		t.Errorf("%s, built with -ldflags='-s -w': IsGo %v, Go build id %q", stripped, goBin, ids.Go)
	}

	// The same file with no section headers: e_shoff, e_shnum and
	// e_shstrndx zeroed, as sstrip leaves a file.
	data, err := os.ReadFile(stripped)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(data[0x28:], 0) // e_shoff
	binary.LittleEndian.PutUint16(data[0x3c:], 0) // e_shnum
	binary.LittleEndian.PutUint16(data[0x3e:], 0) // e_shstrndx
	noSections := filepath.Join(t.TempDir(), "gohog-nosections")
	if err := os.WriteFile(noSections, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if goBin, _ := isGoFile(t, noSections); !goBin {
		t.Errorf("a Go binary without section headers is not seen as Go")
	}

	c := testworkload.BuildC(t, "cpuhog.c")
	if goBin, ids := isGoFile(t, c); goBin || ids.GNU == "" {
		t.Errorf("%s (C): IsGo %v, GNU build id %q", c, goBin, ids.GNU)
	}
}
