package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// suite is one test package and the top-level tests run from it.
type suite struct {
	pkg   string // relative to the repository, e.g. internal/bpf/profiler
	tests []string
	// benches are top-level benchmarks, run once each (-test.benchtime
	// 1x) after the tests: their figures are printed, and they pass when
	// they report them.
	benches []string
	// goarch is the one architecture the tests run on; "" for every one.
	goarch string
}

// readLines returns the fields of each line of path that is neither blank
// nor a # comment. A field in single quotes may hold spaces
// ('-ldflags=-s -w').
func readLines(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines [][]string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields, err := splitFields(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if len(fields) > 0 {
			lines = append(lines, fields)
		}
	}
	return lines, sc.Err()
}

// splitFields splits line at blanks outside single quotes, up to a # outside
// them.
func splitFields(line string) ([]string, error) {
	var fields []string
	var field strings.Builder
	inField, quoted := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			quoted = !quoted
			inField = true
		case quoted:
			field.WriteRune(r)
		case r == '#':
			if inField {
				fields = append(fields, field.String())
			}
			return fields, nil
		case r == ' ' || r == '\t':
			if inField {
				fields = append(fields, field.String())
				field.Reset()
				inField = false
			}
		default:
			field.WriteRune(r)
			inField = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unclosed quote")
	}
	if inField {
		fields = append(fields, field.String())
	}
	return fields, nil
}

// readSuites reads tests.txt: a package, then test names; a package may
// take several lines. A line that starts with "GOARCH:" (amd64:) lists
// tests that run on that architecture only.
func readSuites(path string) ([]suite, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, fmt.Errorf("reading the test list: %w", err)
	}
	var suites []suite
	for _, f := range lines {
		goarch := ""
		if arch, ok := strings.CutSuffix(f[0], ":"); ok {
			if !slices.ContainsFunc(targets, func(t target) bool { return t.goarch == arch }) {
				return nil, fmt.Errorf("%s: %q is no target's architecture", path, arch)
			}
			goarch, f = arch, f[1:]
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("%s: %q names no test", path, f)
		}
		pkg := strings.TrimPrefix(strings.TrimSuffix(f[0], "/"), "./")
		i := slices.IndexFunc(suites, func(s suite) bool { return s.pkg == pkg && s.goarch == goarch })
		if i < 0 {
			suites = append(suites, suite{pkg: pkg, goarch: goarch})
			i = len(suites) - 1
		}
		for _, name := range f[1:] {
			bench := strings.HasPrefix(name, "Benchmark")
			if !strings.HasPrefix(name, "Test") && !bench || strings.ContainsAny(name, "/^$|()*.") {
				return nil, fmt.Errorf("%s: %q is not the name of a top-level test or benchmark", path, name)
			}
			if slices.ContainsFunc(suites, func(s suite) bool {
				return s.pkg == pkg && (slices.Contains(s.tests, name) || slices.Contains(s.benches, name))
			}) {
				return nil, fmt.Errorf("%s: %s %s is listed twice", path, pkg, name)
			}
			if bench {
				suites[i].benches = append(suites[i].benches, name)
			} else {
				suites[i].tests = append(suites[i].tests, name)
			}
		}
	}
	if len(suites) == 0 {
		return nil, fmt.Errorf("%s lists no test", path)
	}
	return suites, nil
}

// suitesFor returns the suites that run on t, one per package.
func suitesFor(t target, suites []suite) []suite {
	var out []suite
	for _, s := range suites {
		if s.goarch != "" && s.goarch != t.goarch {
			continue
		}
		i := slices.IndexFunc(out, func(o suite) bool { return o.pkg == s.pkg })
		if i < 0 {
			out = append(out, suite{pkg: s.pkg})
			i = len(out) - 1
		}
		out[i].tests = append(out[i].tests, s.tests...)
		out[i].benches = append(out[i].benches, s.benches...)
	}
	return out
}

// runPattern is the -test.run pattern of exactly s's tests.
func (s suite) runPattern() string {
	return "^(" + strings.Join(s.tests, "|") + ")$"
}

// benchPattern is the -test.bench pattern of exactly s's benchmarks.
func (s suite) benchPattern() string {
	return "^(" + strings.Join(s.benches, "|") + ")$"
}

// readWorkloads reads workloads.txt: a compiler, a source, its flags.
func readWorkloads(path string) ([]testworkload.Workload, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, fmt.Errorf("reading the workload list: %w", err)
	}
	var ws []testworkload.Workload
	for _, f := range lines {
		c := testworkload.Compiler(f[0])
		switch c {
		case testworkload.GCC, testworkload.GXX, testworkload.MuslGCC, testworkload.Go:
		default:
			return nil, fmt.Errorf("%s: %q is not a compiler vmtest builds with (gcc, g++, musl-gcc, go)", path, f[0])
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("%s: %s names no source", path, f[0])
		}
		ws = append(ws, testworkload.Workload{Compiler: c, Name: f[1], Flags: f[2:]})
	}
	return ws, nil
}
