package ebpfprofreceiver

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// jsFrame is a JavaScript frame: its function, its script and its line.
type jsFrame struct {
	name, file string
	line       int64
}

func (f jsFrame) String() string {
	return fmt.Sprintf("%s@%s:%d", f.name, filepath.Base(f.file), f.line)
}

// jsFrames returns the sample's V8 frames, leaf first.
func jsFrames(s pprofiletest.Sample) []jsFrame {
	var out []jsFrame
	for _, f := range s.Frames() {
		if f.Type == conventions.FrameTypeV8JS {
			out = append(out, jsFrame{f.Name, f.File, f.Line})
		}
	}
	return out
}

// jsSource is a workload script, read to know its functions' lines.
type jsSource struct {
	path  string
	lines []string
}

func readJSSource(t *testing.T, path string) *jsSource {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return &jsSource{path: path, lines: strings.Split(string(b), "\n")}
}

// line returns the 1-based line holding text, which must be there once.
func (s *jsSource) line(t *testing.T, text string) int64 {
	t.Helper()
	found := int64(0)
	for i, l := range s.lines {
		if strings.Contains(l, text) {
			if found != 0 {
				t.Fatalf("%s: %q on lines %d and %d", s.path, text, found, i+1)
			}
			found = int64(i + 1)
		}
	}
	if found == 0 {
		t.Fatalf("%s: no line holds %q", s.path, text)
	}
	return found
}

// function returns the lines [first, last] of the function declared as
// `function name(`, up to the first line that closes it ("}").
func (s *jsSource) function(t *testing.T, name string) [2]int64 {
	t.Helper()
	first := s.line(t, "function "+name+"(")
	for i := int(first); i < len(s.lines); i++ {
		if s.lines[i] == "}" {
			return [2]int64{first, int64(i + 1)}
		}
	}
	t.Fatalf("%s: function %s does not end", s.path, name)
	return [2]int64{}
}

// crunchJS is crunch.js's chain: each frame's function and the lines it
// may be at, leaf first; the last is the script's top level, anonymous.
type crunchJS struct {
	src    *jsSource
	chain  []string
	lines  [][]int64
	ranges map[string][2]int64 // each function's lines; "" the rest
}

func readCrunchJS(t *testing.T, path string) *crunchJS {
	t.Helper()
	src := readJSSource(t, path)
	loop := src.line(t, "for (let i = 0; i < 64; i++)")
	c := &crunchJS{
		src:   src,
		chain: []string{"crunchLeaf", "crunchMiddle", "crunchOuter", "<anonymous>"},
		lines: [][]int64{
			{loop, loop + 1}, // the loop, and its body
			{src.line(t, "return crunchLeaf(")},
			{src.line(t, "return crunchMiddle(")},
			{src.line(t, "sink = crunchOuter(sink)")},
		},
		ranges: map[string][2]int64{},
	}
	for _, f := range c.chain[:3] {
		c.ranges[f] = src.function(t, f)
	}
	return c
}

// holds reports whether the sample's V8 frames start with the chain, in
// crunch.js, at its lines; the builtins it calls may be leafward.
func (c *crunchJS) holds(js []jsFrame) bool {
	// V8's builtins written in JavaScript's stead (Math.imul) run as
	// frames of their own, without a script.
	for len(js) > 0 && js[0].file == "" {
		js = js[1:]
	}
	if len(js) < len(c.chain) {
		return false
	}
	for i, name := range c.chain {
		f := js[i]
		if f.name != name || f.file != c.src.path || !containsLine(c.lines[i], f.line) {
			return false
		}
	}
	return true
}

func containsLine(lines []int64, l int64) bool {
	for _, x := range lines {
		if x == l {
			return true
		}
	}
	return false
}

// functionAt names the function of crunch.js at line: one of the chain's,
// else the top level.
func (c *crunchJS) functionAt(line int64) string {
	for name, r := range c.ranges {
		if line >= r[0] && line <= r[1] {
			return name
		}
	}
	return "<anonymous>"
}

// waitNodeAttached waits until each node process is attached to the V8
// client with node's unwind table loaded, and notes when: its samples
// carry V8 frames and reach _start from then on.
func (p *pythonRun) waitNodeAttached(cmds ...*exec.Cmd) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, cmd := range cmds {
		pid := cmd.Process.Pid
		text := nodeText(pid)
		for !p.r.interps.Attached(uint32(pid)) || text == 0 || !p.r.unwind.Covers(uint32(pid), text) {
			if time.Now().After(deadline) {
				p.t.Fatalf("pid %d (%s) not attached, node's table loaded, within 30 s: %+v", pid, cmd.Path, p.r.interps.Stats())
			}
			time.Sleep(20 * time.Millisecond)
			if text == 0 {
				text = nodeText(pid)
			}
		}
		p.attached[pid] = time.Now()
		p.t.Logf("pid %d (%s) attached %v after the receiver started", pid, cmd.Path, time.Since(p.started).Round(time.Millisecond))
	}
}

// nodeText is an address in the executable mapping of pid's own binary.
func nodeText(pid int) uint64 {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0
	}
	maps, err := process.ReadMappings(pid)
	if err != nil {
		return 0
	}
	for _, m := range maps {
		if m.Executable() && m.Path == exe && m.End-m.Start > 1<<20 {
			return m.Start
		}
	}
	return 0
}

// startNode runs node with args, its output kept for a failure.
func startNode(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return testworkload.Start(t, testenv.LookPath(t, "node"), args...)
}

// waitExit waits for cmd to end on its own, for at most limit.
func waitExit(t *testing.T, cmd *exec.Cmd, limit time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v: %v", cmd.Args, err)
		}
	case <-time.After(limit):
		t.Fatalf("%v did not end within %v", cmd.Args, limit)
	}
}

// chainShare counts, of the main thread samples of pid since it was
// attached, those that hold crunch.js's chain with a complete stack.
func chainShare(t *testing.T, run *pythonRun, pid int, c *crunchJS) (total, chains int64, bad []string) {
	t.Helper()
	for _, s := range run.threadSamples(pid, pid) {
		total += s.Count
		js := jsFrames(s)
		if c.holds(js) && completeStack(s.UserNames()) {
			chains += s.Count
		} else if len(bad) < 4 {
			bad = append(bad, fmt.Sprintf("%v in %s", js, shortChain(s.UserNames())))
		}
	}
	return total, chains, bad
}

// checkJSChain asks that at least 90% of pid's main thread samples hold
// crunch.js's chain, typed v8js, in order, at its lines, and reach _start.
func checkJSChain(t *testing.T, run *pythonRun, pid int, c *crunchJS, what string) {
	t.Helper()
	total, chains, bad := chainShare(t, run, pid, c)
	t.Logf("%s: %d main thread samples, %.1f%% hold %v whole", what, total, pct(chains, total), c.chain)
	if total < 50 {
		t.Errorf("%s: %d samples, too few", what, total)
		return
	}
	if float64(chains) < 0.9*float64(total) {
		t.Errorf("%s: %.1f%% of samples hold the chain, want >= 90%%; some that do not: %v", what, pct(chains, total), bad)
	} else if len(bad) > 0 {
		t.Logf("%s: some that do not: %v", what, bad)
	}
}

// cpuProfile is what a .cpuprofile (node --cpu-prof) holds that the tests
// read: V8's samples of the main thread, by node, each node's hits split
// by the line they were at.
type cpuProfile struct {
	Nodes []struct {
		CallFrame struct {
			FunctionName string `json:"functionName"`
			URL          string `json:"url"`
		} `json:"callFrame"`
		HitCount      int64 `json:"hitCount"`
		PositionTicks []struct {
			Line  int64 `json:"line"`
			Ticks int64 `json:"ticks"`
		} `json:"positionTicks"`
	} `json:"nodes"`
	Samples []int64 `json:"samples"`
}

// readCPUProfile reads the one .cpuprofile node wrote into dir.
func readCPUProfile(t *testing.T, dir string) *cpuProfile {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.cpuprofile"))
	if len(files) != 1 {
		t.Fatalf("node --cpu-prof wrote %v into %s, want one profile", files, dir)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var p cpuProfile
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("reading %s: %v", files[0], err)
	}
	return &p
}

// v8LeafShares are V8's own leaf shares of crunch.js's functions: V8's
// profile does not split code inlined into a frame of its own, but its
// ticks carry the source line they were at, which lies in the function
// the time went to.
func (c *crunchJS) v8LeafShares(p *cpuProfile) map[string]float64 {
	out := map[string]float64{}
	for _, n := range p.Nodes {
		if n.CallFrame.URL != "file://"+c.src.path {
			continue
		}
		for _, pt := range n.PositionTicks {
			out[c.functionAt(pt.Line)] += float64(pt.Ticks)
		}
	}
	for k := range out {
		out[k] /= float64(max(len(p.Samples), 1))
	}
	return out
}

// leafShares are bpfcol's leaf shares of crunch.js's functions over pid's
// main thread samples: by the innermost V8 frame's line, as for V8's.
func (c *crunchJS) leafShares(run *pythonRun, pid int) map[string]float64 {
	out := map[string]float64{}
	var total float64
	for _, s := range run.threadSamples(pid, pid) {
		total += float64(s.Count)
		if js := jsFrames(s); len(js) > 0 && js[0].file == c.src.path {
			out[c.functionAt(js[0].line)] += float64(s.Count)
		}
	}
	for k := range out {
		out[k] /= max(total, 1)
	}
	return out
}

// TestNodeFrames profiles crunch.js under node 20 twice at once, once as
// is and once with V8's own sampling profiler on (--cpu-prof), each run
// until it used 4 s of CPU. Of each main thread's samples taken once
// bpfcol attached, at least 90% hold the chain crunchLeaf <- crunchMiddle
// <- crunchOuter <- the script's top level, typed v8js, at the script's
// lines, though TurboFan inlined the three functions into the top level's
// loop (on-stack replacement); and each function's share of the leaves
// is within 10 points of V8's own.
func TestNodeFrames(t *testing.T) {
	run := startPythonRun(t)
	script := testworkload.Source(t, "crunch.js")
	c := readCrunchJS(t, script)
	profDir := t.TempDir()
	plain := startNode(t, script, "4")
	profiled := startNode(t, "--cpu-prof", "--cpu-prof-dir="+profDir, script, "4")
	run.waitNodeAttached(plain, profiled)
	waitExit(t, plain, 3*time.Minute)
	waitExit(t, profiled, 3*time.Minute)
	run.stop()

	checkJSChain(t, run, plain.Process.Pid, c, "node crunch.js")
	checkJSChain(t, run, profiled.Process.Pid, c, "node --cpu-prof crunch.js")
	theirs := c.v8LeafShares(readCPUProfile(t, profDir))
	ours := c.leafShares(run, profiled.Process.Pid)
	for _, f := range c.chain {
		t.Logf("%-12s leaf share: bpfcol %.3f, V8's profiler %.3f", f, ours[f], theirs[f])
		if math.Abs(ours[f]-theirs[f]) > 0.10 {
			t.Errorf("%s: bpfcol's leaf share %.3f, V8's %.3f: more than 10 points apart", f, ours[f], theirs[f])
		}
	}
	if s := run.r.interps.Stats().Clients["v8"]; s.Attached < 2 || s.Named == 0 {
		t.Errorf("V8 client: %+v", s)
	}
}

// TestNodeEarlyTiers profiles crunch.js kept in each of V8's early tiers,
// the Ignition interpreter and the Sparkplug baseline compiler (flags
// keep it there; without them these are the first moments of every
// function): at least 90% of the main thread's samples hold the same
// chain, at the same lines.
func TestNodeEarlyTiers(t *testing.T) {
	run := startPythonRun(t)
	script := testworkload.Source(t, "crunch.js")
	c := readCrunchJS(t, script)
	tiers := []struct {
		name  string
		flags []string
	}{
		{"Ignition", []string{"--no-opt", "--no-maglev", "--no-sparkplug"}},
		{"Sparkplug", []string{"--no-opt", "--no-maglev", "--always-sparkplug"}},
	}
	var cmds []*exec.Cmd
	for _, tier := range tiers {
		cmds = append(cmds, startNode(t, append(tier.flags, script, "3")...))
	}
	run.waitNodeAttached(cmds...)
	for _, cmd := range cmds {
		waitExit(t, cmd, 3*time.Minute)
	}
	run.stop()
	for i, tier := range tiers {
		checkJSChain(t, run, cmds[i].Process.Pid, c, tier.name)
	}
}

// TestNodeStartedBefore profiles a node process that ran before the
// receiver started, its code optimized already: it is attached at its
// first sample, and its samples hold the chain as a process started
// after.
func TestNodeStartedBefore(t *testing.T) {
	script := testworkload.Source(t, "crunch.js")
	c := readCrunchJS(t, script)
	cmd := startNode(t, script)
	deadline := time.Now().Add(time.Minute)
	for used, _ := threadCPU(cmd.Process.Pid, cmd.Process.Pid); used < time.Second && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		used, _ = threadCPU(cmd.Process.Pid, cmd.Process.Pid)
	}
	run := startPythonRun(t)
	run.waitNodeAttached(cmd)
	run.runFor(3*time.Second, 90*time.Second, cmd)
	_ = cmd.Process.Kill()
	run.stop()
	checkJSChain(t, run, cmd.Process.Pid, c, "node started before")
}

// typescriptProject writes a TypeScript project of n modules, each
// importing the previous one, generic enough to keep the checker busy.
func typescriptProject(t *testing.T, dir string, n int) {
	t.Helper()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := (i + n - 1) % n
		code := fmt.Sprintf(`import { Box%[2]d } from './m%[2]d';
export interface Shape%[1]d<T> { id: number; value: T; children: Shape%[1]d<T>[]; }
export class Box%[1]d<T extends { id: number }> {
  private items: Map<number, T> = new Map();
  add(x: T): this { this.items.set(x.id, x); return this; }
  map<U extends { id: number }>(f: (x: T) => U): Box%[1]d<U> { const b = new Box%[1]d<U>(); for (const v of this.items.values()) b.add(f(v)); return b; }
  fold<R>(init: R, f: (acc: R, x: T) => R): R { let r = init; this.items.forEach(v => { r = f(r, v); }); return r; }
  prev(): Box%[2]d<{ id: number }> { return new Box%[2]d(); }
}
export function build%[1]d(n: number): Shape%[1]d<string> {
  const root: Shape%[1]d<string> = { id: n, value: 'n' + n, children: [] };
  for (let k = 0; k < n %% 7; k++) root.children.push(build%[1]d(k));
  return root;
}
export type Deep%[1]d<T> = T extends object ? { [K in keyof T]: Deep%[1]d<T[K]> } : T;
export const sample%[1]d: Deep%[1]d<Shape%[1]d<number>> = { id: 1, value: 2, children: [] };
`, i, p)
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("m%d.ts", i)), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := `{"compilerOptions":{"strict":true,"target":"es2020","module":"commonjs","noEmit":true},"include":["src"]}`
	if err := os.WriteFile(filepath.Join(dir, "tsconfig.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// installTypeScript installs TypeScript from the npm registry into dir.
func installTypeScript(t *testing.T, dir string) string {
	t.Helper()
	npm := testenv.LookPath(t, "npm")
	cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", dir, "typescript@5.9.3")
	if out, err := cmd.CombinedOutput(); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("installing typescript from the npm registry: %v\n%s", err, out))
	}
	tsc := filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Fatalf("npm installed no tsc: %v", err)
	}
	return tsc
}

// TestNodeRealProgram installs TypeScript from the npm registry into the
// test's directory and profiles its compiler, tsc, checking a generated
// project as a user would, with V8's own profiler on: its main thread's
// samples hold named JavaScript frames, TypeScript's own frames dominate
// them, and the share of samples whose innermost JavaScript frame is
// TypeScript's is within 10 points of V8's (whose profile puts the time
// of builtins and of the runtime's C++ in the JavaScript function that
// called them, as the innermost JavaScript frame of a stack is). That
// share is of the samples whose innermost JavaScript frame is named: one
// read after tsc exited cannot be (7-8% of them here), and counting it
// as not TypeScript's put the share 5 points low, past 10 in one run of
// five.
func TestNodeRealProgram(t *testing.T) {
	dir := t.TempDir()
	tsc := installTypeScript(t, dir)
	project := filepath.Join(dir, "project")
	typescriptProject(t, project, 120)
	profDir := t.TempDir()
	run := startPythonRun(t)
	cmd := startNode(t, "--cpu-prof", "--cpu-prof-dir="+profDir, tsc, "-p", project)
	run.waitNodeAttached(cmd)
	waitExit(t, cmd, 5*time.Minute)
	// The samples of tsc's last drain periods are read after it exited:
	// a JavaScript frame not located while it ran cannot be named from
	// its memory any more (counted as unnamed). The naming goal holds
	// for the samples read while it ran.
	readAlive := uint64(time.Now().Add(-2 * drainInterval).UnixNano())
	run.stop()

	lib := filepath.Join(dir, "node_modules", "typescript", "lib")
	inTS := func(file string) bool {
		return strings.HasPrefix(file, lib+"/") || strings.HasPrefix(file, "file://"+lib+"/")
	}
	pid := cmd.Process.Pid
	// undetermined counts the samples whose innermost JavaScript frame is
	// unnamed: read after tsc exited, whether it was TypeScript's cannot
	// be known, so the share leaves them out.
	var total, withJS, named, innermostTS, undetermined int64
	for _, s := range run.threadSamples(pid, pid) {
		total += s.Count
		js := jsFrames(s)
		if len(js) == 0 {
			continue
		}
		if js[0].name == "[unknown]" {
			undetermined += s.Count
		}
		var alive int64
		for _, ts := range s.Timestamps {
			if ts < readAlive {
				alive++
			}
		}
		withJS += alive
		if !slices.ContainsFunc(js, func(f jsFrame) bool { return f.name == "[unknown]" }) {
			named += alive
		}
		if inTS(js[0].file) {
			innermostTS += s.Count
		}
	}
	p := readCPUProfile(t, profDir)
	var v8Leaf int64
	for _, n := range p.Nodes {
		if inTS(n.CallFrame.URL) {
			v8Leaf += n.HitCount
		}
	}
	determined := total - undetermined
	ours, theirs := float64(innermostTS)/float64(max(determined, 1)), float64(v8Leaf)/float64(max(len(p.Samples), 1))
	t.Logf("tsc: %d main thread samples, %d of them with an unnamed innermost JavaScript frame; of those read while it ran, %d with JavaScript frames, %d all named; %d with the innermost in TypeScript: %.3f of the named; V8's profiler's leaves: %.3f of %d",
		total, undetermined, withJS, named, innermostTS, ours, theirs, len(p.Samples))
	if determined < 100 {
		t.Fatalf("%d samples whose innermost JavaScript frame is known, too few", determined)
	}
	if float64(named) < 0.95*float64(withJS) || float64(innermostTS) < 0.5*float64(total) {
		t.Errorf("want >= 95%% of samples with JavaScript frames all named, >= 50%% with the innermost in TypeScript")
	}
	if math.Abs(ours-theirs) > 0.10 {
		t.Errorf("samples in TypeScript: bpfcol %.3f, V8's profiler %.3f: more than 10 points apart", ours, theirs)
	}
}
