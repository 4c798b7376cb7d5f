package ebpfprofreceiver

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// BenchmarkJVMSampleBPFTime measures the BPF time of one sample of a JVM,
// the process sampled alone (so no other process's samples mix in):
// JavaChain once C2 compiled it (four Java frames and the call stub over
// about ten native ones), run by the interpreter alone (-Xint), and, for
// the cost of the HotSpot walk itself, compiled with interpreters: [].
func BenchmarkJVMSampleBPFTime(b *testing.B) {
	for _, bc := range []struct {
		name     string
		opts     []string
		noInterp bool
	}{
		{"compiled", nil, false},
		{"compiled-no-interpreters", nil, true},
		{"interpreted", []string{"-Xint"}, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				b.Fatalf("enabling BPF statistics: %v", err)
			}
			defer stats.Close()
			dir := testworkload.BuildJava(b, "JavaChain.java")
			started := filepath.Join(b.TempDir(), "started")
			cmd := startJava(b, append(bc.opts, "-cp", dir, "JavaChain", started)...)
			run := startPythonRun(b, func(c *Config, r *profilesReceiver) {
				r.hooks.samplePID = cmd.Process.Pid
				if bc.noInterp {
					c.Interpreters = []string{}
				}
			})
			run.waitFile(started, 90*time.Second, cmd)
			if !bc.noInterp {
				run.waitJVM(cmd)
			}
			// C2 compiles the chain within seconds of its start; 20 s
			// of the main thread on a loaded host.
			run.runThreadsFor(10*time.Second, 60*time.Second, [2]int{cmd.Process.Pid, javaMainThread(b, cmd.Process.Pid)})
			measureBPFTime(b, run)
		})
	}
}
