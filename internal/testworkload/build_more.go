package testworkload

import "testing"

// BuildCXX compiles the named C++ source under src/ with g++ and the extra
// flags, and returns the binary's path. The test is skipped when g++ is not
// installed.
func BuildCXX(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return build(t, Workload{Compiler: GXX, Name: name, Flags: flags})
}

// BuildRust compiles the named single-file Rust program under src/ with
// rustc (std only) and the extra flags, and returns the binary's path. The
// test is skipped when rustc is not installed.
func BuildRust(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return build(t, Workload{Compiler: Rustc, Name: name, Flags: flags})
}
