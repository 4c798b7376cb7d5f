package testworkload

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// BuildCXX compiles the named C++ source under src/ with g++ and the extra
// flags, and returns the binary's path. The test is skipped when g++ is not
// installed.
func BuildCXX(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return buildSingle(t, lookTool(t, "g++"), name, flags)
}

// BuildMusl compiles the named C source under src/ with musl-gcc (musl
// libc instead of glibc; add -static for a static binary) and the extra
// flags, and returns the binary's path. Without musl-gcc the test is
// skipped, or fails under BPFCOL_REQUIRE_BPF=1.
func BuildMusl(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return buildSingle(t, lookTool(t, "musl-gcc"), name, flags)
}

// BuildRust compiles the named single-file Rust program under src/ with
// rustc (std only) and the extra flags, and returns the binary's path. The
// test is skipped when rustc is not installed.
func BuildRust(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return buildSingle(t, lookTool(t, "rustc"), name, flags)
}

func buildSingle(t testing.TB, compiler, name string, flags []string) string {
	t.Helper()
	src, err := sources.ReadFile(path.Join("src", name))
	if err != nil {
		t.Fatalf("reading workload source %q: %v", name, err)
	}
	dir := t.TempDir()
	srcPath := filepath.Join(dir, name)
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		t.Fatalf("writing workload source: %v", err)
	}
	bin := filepath.Join(dir, strings.TrimSuffix(name, filepath.Ext(name)))
	args := append(append([]string{}, flags...), "-o", bin, srcPath)
	run(t, dir, nil, compiler, args...)
	return bin
}
