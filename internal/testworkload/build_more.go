package testworkload

import "testing"

// BuildCXX compiles the named C++ source under src/ with g++ and the extra
// flags, and returns the binary's path. Without g++ the test is skipped, or
// fails under BPFCOL_REQUIRE_BPF=1.
func BuildCXX(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return build(t, Workload{Compiler: GXX, Name: name, Flags: flags})
}

// BuildMusl compiles the named C source under src/ with musl-gcc (musl
// libc instead of glibc; add -static for a static binary) and the extra
// flags, and returns the binary's path. Without musl-gcc the test is
// skipped, or fails under BPFCOL_REQUIRE_BPF=1.
func BuildMusl(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return build(t, Workload{Compiler: MuslGCC, Name: name, Flags: flags})
}

// BuildRust compiles the named single-file Rust program under src/ with
// rustc (std only) and the extra flags, and returns the binary's path.
// Without rustc the test is skipped, or fails under BPFCOL_REQUIRE_BPF=1.
func BuildRust(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return build(t, Workload{Compiler: Rustc, Name: name, Flags: flags})
}
