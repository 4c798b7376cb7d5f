package testworkload

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// Source writes the named source under src/ (for example "crunch.py" or
// "crunch.js", run by an interpreter; "python/threads.py") to a temp dir,
// under its base name, and returns its path.
func Source(t testing.TB, name string) string {
	t.Helper()
	src, err := sources.ReadFile(path.Join("src", name))
	if err != nil {
		t.Fatalf("reading workload source %q: %v", name, err)
	}
	p := filepath.Join(t.TempDir(), path.Base(name))
	if err := os.WriteFile(p, src, 0o644); err != nil {
		t.Fatalf("writing workload source: %v", err)
	}
	return p
}

// BuildJava compiles the named single-class Java source under src/ (for
// example "Crunch.java") with javac and returns the directory of its class
// files: run it with `java -cp DIR Crunch`. The test is skipped when javac
// is not installed.
func BuildJava(t testing.TB, name string) string {
	t.Helper()
	javac := lookTool(t, "javac")
	src := Source(t, name)
	dir := t.TempDir()
	run(t, dir, nil, javac, "-d", dir, src)
	if _, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(name, ".java")+".class")); err != nil {
		t.Fatalf("javac wrote no class for %s: %v", name, err)
	}
	return dir
}
