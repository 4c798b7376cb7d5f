package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// testResult is how one listed test ended in the guest.
type testResult struct {
	pkg, name string
	// outcome is "PASS", "FAIL", "SKIP", "PASS, but a subtest skipped",
	// or "" when it never ended.
	outcome string
	// kernelLacks is why a test skipped that needs a kernel feature the
	// guest's kernel does not have (testenv.Kernel): "kernel lacks BPF
	// task work (since 6.18)". Such a test neither passed nor failed.
	kernelLacks string
}

// guestReport is what the host read from one guest's console.
type guestReport struct {
	booted, done bool
	uname        string // "6.1.0-56-cloud-amd64 x86_64 2"
	results      []testResult
	// problems are failures not tied to one test: a test binary that
	// crashed or timed out, a suite that never started.
	problems []string
	// benchLines are the result lines of the benchmarks, as printed.
	benchLines []string
}

func (r *guestReport) counts() (passed, failed int) {
	for _, t := range r.results {
		switch {
		case t.outcome == "PASS":
			passed++
		case t.kernelLacks == "":
			failed++
		}
	}
	return passed, failed
}

func (r *guestReport) ok() bool {
	_, failed := r.counts()
	return r.booted && r.done && failed == 0 && len(r.problems) == 0
}

// consoleParser reads the guest's console line by line. Test output comes
// from -test.v=test2json, whose framing lines start with ^V: top-level
// tests end with "^V--- PASS: Name (...)" (subtests' names hold a slash).
type consoleParser struct {
	marker  string
	suites  []suite
	report  guestReport
	current *suite
	// benching: the current suite's benchmarks run, not its tests.
	benching bool
	ended    map[string]string // test name → outcome, in the current suite
	// skippedSub holds the tests of the current suite with a subtest that
	// skipped for another reason than a missing kernel feature.
	skippedSub map[string]bool
	// lacks maps tests of the current suite that skipped for a missing
	// kernel feature to the feature; lastLack is the last such message
	// since a test's output began.
	lacks    map[string]string
	lastLack string
}

// kernelLack finds testenv.Kernel's skip message.
var kernelLack = regexp.MustCompile(`kernel lacks (.+?\(since [0-9.]+\))`)

func newConsoleParser(nonce string, suites []suite) *consoleParser {
	return &consoleParser{marker: marker(nonce) + " ", suites: suites}
}

// line takes one console line; it returns the marker event it held, if
// any ("boot", "start", "exit", "done").
func (p *consoleParser) line(l string) string {
	l = strings.TrimRight(l, "\r")
	if rest, ok := strings.CutPrefix(l, p.marker); ok {
		return p.event(rest)
	}
	if p.current == nil {
		return ""
	}
	if m := kernelLack.FindStringSubmatch(l); m != nil {
		p.lastLack = m[1]
	}
	if strings.HasPrefix(l, "\x16=== ") {
		// RUN, NAME, CONT: another test's output follows.
		p.lastLack = ""
	}
	if p.benching {
		p.benchLine(l)
		return ""
	}
	frame, ok := strings.CutPrefix(l, "\x16--- ")
	if !ok {
		return ""
	}
	lack := p.lastLack
	p.lastLack = ""
	outcome, rest, ok := strings.Cut(frame, ": ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	if top, _, sub := strings.Cut(name, "/"); sub {
		// A subtest that skipped did not test what its test names,
		// unless the kernel lacks what it needs.
		if outcome == "SKIP" && lack == "" {
			p.skippedSub[top] = true
		}
		return ""
	}
	if outcome == "SKIP" && lack != "" {
		p.lacks[name] = lack
	}
	p.ended[name] = outcome
	return ""
}

func (p *consoleParser) event(rest string) string {
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return ""
	}
	switch fields[0] {
	case "boot":
		p.report.booted = true
		p.report.uname = strings.Join(fields[1:], " ")
	case "start", "bench":
		if len(fields) == 2 {
			if i := slices.IndexFunc(p.suites, func(s suite) bool { return s.pkg == fields[1] }); i >= 0 {
				p.current = &p.suites[i]
				p.benching = fields[0] == "bench"
				p.ended = map[string]string{}
				p.skippedSub = map[string]bool{}
				p.lacks = map[string]string{}
			}
		}
	case "exit":
		if p.current != nil && len(fields) == 3 && fields[1] == p.current.pkg {
			p.endSuite(fields[2])
		}
	case "done":
		p.report.done = true
	}
	return fields[0]
}

// benchResult is a benchmark's result line: its name (a sub-benchmark's
// too), -GOMAXPROCS, the iterations, then the figures.
var benchResult = regexp.MustCompile(`^(Benchmark[^/\s]+)(/\S*)?-\d+\s+\d+\s+.*\bns/op\b`)

// benchLine takes a console line of a benchmark run: a result line passes
// its top-level benchmark unless a FAIL frame of it came.
func (p *consoleParser) benchLine(l string) {
	if m := benchResult.FindStringSubmatch(l); m != nil {
		p.report.benchLines = append(p.report.benchLines, strings.Join(strings.Fields(l), " "))
		if p.ended[m[1]] == "" {
			p.ended[m[1]] = "PASS"
		}
		return
	}
	if frame, ok := strings.CutPrefix(l, "\x16--- FAIL: "); ok {
		name, _, _ := strings.Cut(frame, " ")
		top, _, _ := strings.Cut(name, "/")
		p.ended[top] = "FAIL"
	}
}

// endSuite records the outcome of each of the current suite's tests (or
// benchmarks).
func (p *consoleParser) endSuite(status string) {
	s := p.current
	p.current = nil
	names := s.tests
	if p.benching {
		names = s.benches
	}
	p.benching = false
	failing := false
	for _, name := range names {
		outcome := p.ended[name]
		if outcome == "PASS" && p.skippedSub[name] {
			outcome = "PASS, but a subtest skipped"
		}
		lacks := p.lacks[name]
		if outcome != "PASS" && lacks == "" {
			failing = true
		}
		p.report.results = append(p.report.results, testResult{pkg: s.pkg, name: name, outcome: outcome, kernelLacks: lacks})
	}
	if code, err := strconv.Atoi(status); err != nil || (code != 0 && !failing) {
		// Every test passed, yet the binary failed: it crashed after
		// them, or a test not listed ran and failed.
		p.report.problems = append(p.report.problems, fmt.Sprintf("%s: the test binary exited with status %s", s.pkg, status))
	}
}

// finish closes the report once the console ended: tests of a suite that
// never ended, and suites never started, fail.
func (p *consoleParser) finish() *guestReport {
	if p.current != nil {
		p.report.problems = append(p.report.problems, fmt.Sprintf("%s: the guest stopped while its tests ran", p.current.pkg))
		p.endSuite("none")
	}
	for _, s := range p.suites {
		for _, name := range append(slices.Clone(s.tests), s.benches...) {
			if !slices.ContainsFunc(p.report.results, func(r testResult) bool { return r.pkg == s.pkg && r.name == name }) {
				p.report.results = append(p.report.results, testResult{pkg: s.pkg, name: name})
			}
		}
	}
	return &p.report
}
