package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// javaChain is JavaChain.java's chain, leaf first.
var javaChain = []string{"chainLeaf", "chainMiddle", "chainOuter", "main"}

// hasJavaChain reports whether a sample's Java frames start with
// javaChain, each in JavaChain.java with a line.
func hasJavaChain(s pprofiletest.Sample) bool {
	var java []pprofiletest.Frame
	for _, f := range s.Frames() {
		if f.Type == conventions.FrameTypeJVM && strings.Contains(f.Name, "JavaChain.") {
			java = append(java, f)
		}
	}
	if len(java) < len(javaChain) {
		return false
	}
	for i, m := range javaChain {
		if !strings.Contains(java[i].Name, "JavaChain."+m+"(") || filepath.Base(java[i].File) != "JavaChain.java" || java[i].Line <= 0 {
			return false
		}
	}
	return true
}

// TestJVMFramesEndToEnd runs bin/bpfcol while OpenJDK runs JavaChain with
// no option, and reads its Java frames back from the OTLP it exports,
// typed jvm with their files and lines, and from the pprof exporter's file
// with the real `go tool pprof`: -lines shows chainLeaf's loop in
// JavaChain.java as the file's hottest line.
func TestJVMFramesEndToEnd(t *testing.T) {
	testenv.RequireBPF(t)
	java := testenv.LookPath(t, "java")
	classes := testworkload.BuildJava(t, "JavaChain.java")
	server := startProfilesServer(t)
	dir := filepath.Join(t.TempDir(), "profiles")
	col := startCollector(t, pythonConfig(server.addr, dir))
	workload := testworkload.Start(t, java, "-cp", classes, "JavaChain")
	pid := int64(workload.Process.Pid)

	ofPID, withChain := waitChainSamples(t, server, col, pid, hasJavaChain, 200, 90*time.Second)
	t.Logf("OTLP: %d samples of the JVM, %d with JavaChain's chain typed jvm, with files and lines", ofPID, withChain)
	if withChain < 200 {
		t.Fatalf("within 90 s: %d of %d samples over OTLP carry the chain\ncollector output:\n%s", withChain, ofPID, col.output)
	}

	latest := filepath.Join(dir, "latest.pb.gz")
	if _, err := os.Stat(latest); err != nil {
		t.Fatalf("no pprof file: %v", err)
	}
	top, err := goPprof(t, "-top", "-lines", "-tagfocus=pid="+strconv.FormatInt(pid, 10), latest)
	if err != nil {
		t.Fatal(err)
	}
	// The hottest line of JavaChain.java is in chainLeaf's loop
	// (lines 12-13 of the source), inlined or not.
	var best string
	var bestFlat int64
	for name, row := range parseTop(top) {
		// pprof marks a line inlined into its caller " (inline)".
		name = strings.TrimSuffix(name, " (inline)")
		if strings.Contains(name, "JavaChain.java:") && row.flat > bestFlat {
			best, bestFlat = name, row.flat
		}
	}
	t.Logf("go tool pprof -lines: hottest line of JavaChain.java %q, flat %d", best, bestFlat)
	if !strings.Contains(best, "JavaChain.chainLeaf") || !(strings.HasSuffix(best, "JavaChain.java:12") || strings.HasSuffix(best, "JavaChain.java:13")) {
		t.Fatalf("go tool pprof -top -lines does not show chainLeaf's loop as the hottest line of JavaChain.java:\n%s", top)
	}
	if err := col.stop(); err != nil {
		t.Errorf("stopping the collector: %v", err)
	}
}
