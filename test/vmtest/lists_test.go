package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestListsNameRealTests checks, on the host, that every test tests.txt
// names exists in its package (a renamed test fails here, not only in the
// VMs), and that workloads.txt names real sources.
func TestListsNameRealTests(t *testing.T) {
	suites, err := readSuites("tests.txt")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range suites {
		files, _ := filepath.Glob(filepath.Join("..", "..", s.pkg, "*_test.go"))
		if len(files) == 0 {
			t.Errorf("%s has no tests", s.pkg)
			continue
		}
		var src []byte
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src = append(src, b...)
		}
		for _, name := range s.tests {
			if !regexp.MustCompile(`(?m)^func ` + name + `\(t \*testing\.T\)`).Match(src) {
				t.Errorf("tests.txt: %s has no test %s", s.pkg, name)
			}
			n++
		}
		for _, name := range s.benches {
			if !regexp.MustCompile(`(?m)^func ` + name + `\(b \*testing\.B\)`).Match(src) {
				t.Errorf("tests.txt: %s has no benchmark %s", s.pkg, name)
			}
			n++
		}
	}
	workloads, err := readWorkloads("workloads.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workloads {
		if _, err := os.Stat(filepath.Join("..", "..", "internal", "testworkload", "src", w.Name)); err != nil {
			t.Errorf("workloads.txt: %q: %v", w, err)
		}
	}
	t.Logf("%d tests in %d packages, %d workloads", n, len(suites), len(workloads))
}
