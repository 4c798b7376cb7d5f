package debuginfod

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

type testELF struct {
	path string
	id   string
	data []byte
}

// buildELFs compiles n distinct C programs with DWARF and a SHA-1 GNU
// build-id: real debug files, as a debuginfod server would serve.
func buildELFs(t testing.TB, n int) []testELF {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed (make test installs it): %v", err)
	}
	dir := t.TempDir()
	var out []testELF
	for i := range n {
		src := filepath.Join(dir, fmt.Sprintf("w%d.c", i))
		prog := fmt.Sprintf("#include <stdio.h>\nint work%d(int x) { return x * %d; }\nint main(void) { printf(\"%%d\\n\", work%d(3)); return 0; }\n", i, i+2, i)
		if err := os.WriteFile(src, []byte(prog), 0o600); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, fmt.Sprintf("w%d", i))
		if b, err := exec.Command(gcc, "-g", "-O1", "-Wl,--build-id=sha1", "-o", bin, src).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, b)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, testELF{bin, gnuBuildID(t, bin), data})
	}
	return out
}

// gnuBuildID reads the NT_GNU_BUILD_ID note through debug/elf, a reader
// independent of StreamCheck.
func gnuBuildID(t testing.TB, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		t.Fatalf("%s has no .note.gnu.build-id", path)
	}
	d, err := s.Data()
	if err != nil || len(d) < 16 {
		t.Fatalf("reading the build-id note of %s: %v", path, err)
	}
	namesz, descsz := binary.LittleEndian.Uint32(d), binary.LittleEndian.Uint32(d[4:])
	off := 12 + (namesz+3)&^3
	return hex.EncodeToString(d[off : off+descsz])
}

func fileEquals(path string, want []byte) bool {
	got, err := os.ReadFile(path)
	return err == nil && bytes.Equal(got, want)
}

// leftovers lists everything in the cache's build-id directories.
func leftovers(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".build-id", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
