package testworkload

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// Python is an installed CPython interpreter.
type Python struct {
	// Name tells the build apart: "3.12 (pyenv)", "3.11 (debian)".
	Name string
	// Path is the interpreter's executable.
	Path string
	// Minor is its minor version (3.Minor).
	Minor int
}

// pyenvVersions are the CPython builds under ~/.pyenv the tests profile:
// shared builds, libpython3.X.so with DWARF.
var pyenvVersions = map[int]string{
	6: "3.6.15", 7: "3.7.16", 8: "3.8.18", 9: "3.9.18",
	10: "3.10.13", 11: "3.11.7", 12: "3.12.1", 13: "3.13.0",
}

// DebianPython is Debian's python3.11: a static, stripped build.
const DebianPython = "/usr/bin/python3.11"

// PyenvPython returns pyenv's CPython 3.minor; a missing one fails the
// test under BPFCOL_REQUIRE_BPF=1, else skips it.
func PyenvPython(t testing.TB, minor int) Python {
	t.Helper()
	v, ok := pyenvVersions[minor]
	if !ok {
		t.Fatalf("no pyenv build of CPython 3.%d is known", minor)
	}
	home, _ := os.UserHomeDir()
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		root = filepath.Join(home, ".pyenv")
	}
	p := filepath.Join(root, "versions", v, "bin", fmt.Sprintf("python3.%d", minor))
	if _, err := os.Stat(p); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("CPython %s is not installed under pyenv: %v", v, err))
	}
	return Python{Name: fmt.Sprintf("3.%d (pyenv)", minor), Path: p, Minor: minor}
}

// Pythons returns every CPython the tests profile: pyenv's 3.6 to 3.13
// and Debian's python3.11.
func Pythons(t testing.TB) []Python {
	t.Helper()
	var out []Python
	for minor := 6; minor <= 13; minor++ {
		out = append(out, PyenvPython(t, minor))
	}
	return append(out, Debian311(t))
}

// Debian311 returns Debian's python3.11.
func Debian311(t testing.TB) Python {
	t.Helper()
	if _, err := os.Stat(DebianPython); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("%s is not installed: %v", DebianPython, err))
	}
	return Python{Name: "3.11 (debian)", Path: DebianPython, Minor: 11}
}

// PythonScript writes the named script under src/python/ into a temp
// dir and returns its path.
func PythonScript(t testing.TB, name string) string {
	t.Helper()
	return Source(t, path.Join("python", name))
}
