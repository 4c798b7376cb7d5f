package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func matches(re, s string) bool { return regexp.MustCompile("(?m)" + re).MatchString(s) }

// console is a guest console as -test.v=test2json prints it, with the
// serial line's \r\n endings.
func console(lines ...string) []string {
	for i, l := range lines {
		lines[i] = strings.ReplaceAll(l, "^V", "\x16") + "\r"
	}
	return lines
}

func parse(suites []suite, lines []string) *guestReport {
	p := newConsoleParser("n0", suites)
	for _, l := range lines {
		p.line(l)
	}
	return p.finish()
}

func TestConsoleParser(t *testing.T) {
	suites := []suite{
		{pkg: "a", tests: []string{"TestPass", "TestSkip", "TestFail"}},
		{pkg: "b", tests: []string{"TestPass", "TestMissing", "TestSub", "TestOld", "TestOldSub"}},
	}
	r := parse(suites, console(
		"[    0.1] kernel noise",
		"vmtest.n0 boot 6.1.0-56-cloud-amd64 x86_64 2",
		"vmtest.n0 start a",
		"^V=== RUN   TestPass",
		"^V=== RUN   TestPass/sub",
		"^V--- FAIL: TestPass/sub (0.00s)", // a subtest line names its parent
		"    --- FAIL: TestFail (0.00s)",   // output, not framing
		"^V--- PASS: TestPass (1.00s)",
		"^V--- SKIP: TestSkip (0.00s)",
		"^V--- FAIL: TestFail (0.20s)",
		"vmtest.n0 exit a 1",
		"vmtest.n1 start b", // another run's nonce
		"vmtest.n0 start b",
		"^V--- PASS: TestPass (0.10s)",
		"^V--- SKIP: TestSub/objdump (0.00s)", // a skipped subtest fails its test
		"^V--- PASS: TestSub (0.10s)",
		"^V=== RUN   TestOld",
		"    require.go:43: kernel lacks BPF task work (since 6.18): kfunc missing",
		"^V--- SKIP: TestOld (0.00s)", // neither passed nor failed
		"^V=== RUN   TestOldSub/multi",
		"    require.go:43: kernel lacks uprobe_multi links (since 6.6): no",
		"^V--- SKIP: TestOldSub/multi (0.00s)",
		"^V=== NAME  TestOldSub",
		"^V--- PASS: TestOldSub (0.10s)",
		"vmtest.n0 exit b 0",
		"vmtest.n0 done",
	))
	if !r.booted || !r.done || r.uname != "6.1.0-56-cloud-amd64 x86_64 2" {
		t.Fatalf("report %+v", r)
	}
	want := map[string]string{"a TestPass": "PASS", "a TestSkip": "SKIP", "a TestFail": "FAIL", "b TestPass": "PASS", "b TestMissing": "", "b TestSub": "PASS, but a subtest skipped", "b TestOld": "SKIP", "b TestOldSub": "PASS"}
	for _, tr := range r.results {
		if w, ok := want[tr.pkg+" "+tr.name]; !ok || w != tr.outcome {
			t.Errorf("%s %s: %q, want %q", tr.pkg, tr.name, tr.outcome, w)
		}
		delete(want, tr.pkg+" "+tr.name)
	}
	if len(want) > 0 {
		t.Errorf("no result for %v", want)
	}
	if passed, failed := r.counts(); passed != 3 || failed != 4 || r.ok() {
		t.Errorf("%d passed, %d failed, ok %v; want 3, 4, false", passed, failed, r.ok())
	}
	for _, tr := range r.results {
		if want := map[string]string{"TestOld": "BPF task work (since 6.18)"}[tr.name]; tr.kernelLacks != want {
			t.Errorf("%s %s: kernel lacks %q, want %q", tr.pkg, tr.name, tr.kernelLacks, want)
		}
	}
	if len(r.problems) != 0 {
		t.Errorf("problems %v, want none: the failing suites' status explains itself", r.problems)
	}
}

// TestConsoleParserBenchmarks reads a benchmark run: a benchmark passes
// when it printed a result line and no FAIL frame, and its result lines
// are kept to be printed.
func TestConsoleParserBenchmarks(t *testing.T) {
	suites := []suite{{pkg: "a", tests: []string{"TestPass"}, benches: []string{"BenchmarkRatio", "BenchmarkFails", "BenchmarkSilent"}}}
	r := parse(suites, console(
		"vmtest.n0 boot 6.1.0-57-cloud-arm64 aarch64 2",
		"vmtest.n0 start a",
		"^V--- PASS: TestPass (1.00s)",
		"vmtest.n0 exit a 0",
		"vmtest.n0 bench a",
		"goos: linux",
		"^V=== RUN   BenchmarkRatio",
		"BenchmarkRatio",
		"^V=== RUN   BenchmarkRatio/f_stp",
		"BenchmarkRatio/f_stp",
		"BenchmarkRatio/f_stp-2         \t       1\t 235229013 ns/op\t       1.167 hit/empty",
		"^V=== RUN   BenchmarkFails",
		"BenchmarkFails-2   1   5 ns/op",
		"^V--- FAIL: BenchmarkFails/sub",
		"^V=== RUN   BenchmarkSilent",
		"^VFAIL",
		"vmtest.n0 exit a 1",
		"vmtest.n0 done",
	))
	want := map[string]string{"TestPass": "PASS", "BenchmarkRatio": "PASS", "BenchmarkFails": "FAIL", "BenchmarkSilent": ""}
	for _, tr := range r.results {
		if w, ok := want[tr.name]; !ok || w != tr.outcome {
			t.Errorf("%s: %q, want %q", tr.name, tr.outcome, w)
		}
		delete(want, tr.name)
	}
	if len(want) > 0 {
		t.Errorf("no result for %v", want)
	}
	if len(r.benchLines) != 2 || !strings.HasPrefix(r.benchLines[0], "BenchmarkRatio/f_stp-2 1 235229013 ns/op 1.167 hit/empty") {
		t.Errorf("result lines %q", r.benchLines)
	}
	if passed, failed := r.counts(); passed != 2 || failed != 2 {
		t.Errorf("%d passed, %d failed; want 2, 2", passed, failed)
	}
}

func TestConsoleParserCrashesAndStops(t *testing.T) {
	suites := []suite{
		{pkg: "a", tests: []string{"TestPass"}},
		{pkg: "b", tests: []string{"TestHangs"}},
		{pkg: "c", tests: []string{"TestNeverRun"}},
	}
	r := parse(suites, console(
		"vmtest.n0 boot x",
		"vmtest.n0 start a",
		"^V--- PASS: TestPass (1.00s)",
		"panic: after the tests",
		"vmtest.n0 exit a 2",
		"vmtest.n0 start b",
		"^V=== RUN   TestHangs",
	))
	if r.ok() || r.done {
		t.Fatalf("a guest that stopped passed: %+v", r)
	}
	if passed, failed := r.counts(); passed != 1 || failed != 2 {
		t.Errorf("%d passed, %d failed; want 1, 2", passed, failed)
	}
	got := strings.Join(r.problems, "\n")
	if !strings.Contains(got, "a: the test binary exited with status 2") || !strings.Contains(got, "b: the guest stopped while its tests ran") {
		t.Errorf("problems:\n%s", got)
	}
	if r := parse(suites, nil); r.booted || r.ok() {
		t.Errorf("a silent guest: %+v", r)
	}
}

func TestReadSuites(t *testing.T) {
	write := func(s string) string {
		p := t.TempDir() + "/tests.txt"
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	suites, err := readSuites(write("# c\n./a/b/ TestX TestY # why\n\nc TestZ\na/b TestW\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(suites) != 2 || suites[0].pkg != "a/b" || strings.Join(suites[0].tests, ",") != "TestX,TestY,TestW" || suites[0].runPattern() != "^(TestX|TestY|TestW)$" {
		t.Errorf("suites %+v", suites)
	}
	// Benchmarks, run apart from the tests.
	suites, err = readSuites(write("a TestX BenchmarkY\na BenchmarkZ\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(suites) != 1 || strings.Join(suites[0].tests, ",") != "TestX" || suites[0].benchPattern() != "^(BenchmarkY|BenchmarkZ)$" {
		t.Errorf("suites %+v", suites)
	}
	// A line for one architecture: its tests run on its targets only.
	suites, err = readSuites(write("a/b TestX\namd64: a/b TestY\namd64: c TestZ\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		got := suitesFor(tg, suites)
		want := "a/b:TestX"
		if tg.goarch == "amd64" {
			want = "a/b:TestX,TestY c:TestZ"
		}
		var parts []string
		for _, s := range got {
			parts = append(parts, s.pkg+":"+strings.Join(s.tests, ","))
		}
		if strings.Join(parts, " ") != want {
			t.Errorf("%s runs %v, want %s", tg.name, parts, want)
		}
	}
	for _, bad := range []string{"a\n", "a TestX/sub\n", "a Test.*\n", "a TestX TestX\n", "a ExampleX\n", "a BenchmarkX BenchmarkX\n", "# nothing\n",
		"amd64: a TestX\na TestX\n", "sparc: a TestX\n", "amd64: a\n"} {
		if _, err := readSuites(write(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSplitFields(t *testing.T) {
	for line, want := range map[string]string{
		"go goscope '-ldflags=-s -w' # note": "go|goscope|-ldflags=-s -w",
		"  gcc\tx.c -O2  ":                   "gcc|x.c|-O2",
		"# all comment":                      "",
		"a '' b":                             "a||b",
	} {
		got, err := splitFields(line)
		if err != nil || strings.Join(got, "|") != want {
			t.Errorf("splitFields(%q) = %q, %v; want %q", line, got, err, want)
		}
	}
	if _, err := splitFields("a 'b"); err == nil {
		t.Error("an unclosed quote accepted")
	}
}
