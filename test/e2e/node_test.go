package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// crunchJSChain is crunch.js's chain, leaf first: TurboFan inlines it
// into the script's top level, one location with several lines.
var crunchJSChain = []string{"crunchLeaf", "crunchMiddle", "crunchOuter"}

// hasCrunchJSChain reports whether a sample's V8 frames start with
// crunchJSChain, in crunch.js, at lines.
func hasCrunchJSChain(s pprofiletest.Sample, script string) bool {
	var js []pprofiletest.Frame
	for _, f := range s.Frames() {
		if f.Type == conventions.FrameTypeV8JS {
			js = append(js, f)
		}
	}
	if len(js) < len(crunchJSChain) {
		return false
	}
	for i, name := range crunchJSChain {
		if js[i].Name != name || js[i].File != script || js[i].Line == 0 {
			return false
		}
	}
	return true
}

// TestNodeFramesEndToEnd runs bin/bpfcol while node runs crunch.js, and
// reads its JavaScript frames back from the OTLP it exports, typed v8js
// with their lines, and from the pprof exporter's file with the real `go
// tool pprof`: crunchLeaf's loop is the script's hottest line.
func TestNodeFramesEndToEnd(t *testing.T) {
	testenv.RequireBPF(t)
	node := testenv.LookPath(t, "node")
	script := testworkload.Source(t, "crunch.js")
	server := startProfilesServer(t)
	dir := filepath.Join(t.TempDir(), "profiles")
	col := startCollector(t, pythonConfig(server.addr, dir))
	workload := testworkload.Start(t, node, script)
	pid := int64(workload.Process.Pid)

	deadline := time.Now().Add(60 * time.Second)
	var ofPID, withChain int64
	for time.Now().Before(deadline) && withChain < 50 {
		time.Sleep(time.Second)
		if done, err := col.exited(); done {
			t.Fatalf("collector exited: %v\n%s", err, col.output)
		}
		ofPID, withChain = 0, 0
		for _, p := range server.all() {
			for _, s := range pprofiletest.Samples(p) {
				if s.PID != pid {
					continue
				}
				ofPID += s.Count
				if hasCrunchJSChain(s, script) {
					withChain += s.Count
				}
			}
		}
	}
	t.Logf("OTLP: %d samples of the workload, %d with crunch.js's chain typed v8js, with lines", ofPID, withChain)
	if withChain < 50 {
		t.Fatalf("within 60 s: %d of %d samples over OTLP carry the chain\ncollector output:\n%s", withChain, ofPID, col.output)
	}

	latest := filepath.Join(dir, "latest.pb.gz")
	if _, err := os.Stat(latest); err != nil {
		t.Fatalf("no pprof file: %v", err)
	}
	top, err := goPprof(t, "-top", "-lines", "-tagfocus=pid="+strconv.FormatInt(pid, 10), latest)
	if err != nil {
		t.Fatal(err)
	}
	// "crunchLeaf /tmp/.../crunch.js:7 (inline)", its loop or the loop's
	// body, the hottest line: inlined into the top level's code, which
	// pprof marks.
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	before, _, _ := strings.Cut(string(src), "for (let i = 0; i < 64; i++)")
	loop := strings.Count(before, "\n") + 1
	hot := regexp.MustCompile(fmt.Sprintf(`^crunchLeaf \S*crunch\.js:(%d|%d)( \(inline\))?$`, loop, loop+1))
	var best string
	var bestFlat int64
	for name, row := range parseTop(top) {
		if strings.Contains(name, "crunch.js:") && row.flat > bestFlat {
			best, bestFlat = name, row.flat
		}
	}
	t.Logf("go tool pprof -lines: the hottest line of crunch.js %q, flat %d", best, bestFlat)
	if !hot.MatchString(best) {
		t.Fatalf("go tool pprof -top -lines does not show crunchLeaf's loop as the hottest line of crunch.js:\n%s", top)
	}
	if err := col.stop(); err != nil {
		t.Errorf("stopping the collector: %v", err)
	}
}
