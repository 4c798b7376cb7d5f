package ebpfprofreceiver

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// BenchmarkPythonSampleBPFTime measures the BPF time of one sample of a
// CPython process, the process sampled alone (so no other process's
// samples mix in): crunch.py under 3.12 (four Python frames over about
// twenty native ones) and 3.9 (each Python frame its own loop call), the
// 600-deep recursion under 3.12 (512 frames and the marker), and, for the
// cost of the Python walk itself, crunch.py with interpreters: [].
func BenchmarkPythonSampleBPFTime(b *testing.B) {
	for _, bc := range []struct {
		name     string
		minor    int
		script   string
		args     []string
		noInterp bool
	}{
		{"crunch-3.12", 12, "crunch.py", []string{"/dev/null"}, false},
		{"crunch-3.12-no-interpreters", 12, "crunch.py", []string{"/dev/null"}, true},
		{"crunch-3.9", 9, "crunch.py", []string{"/dev/null"}, false},
		{"deep600-3.12", 12, "deep.py", []string{"600"}, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				b.Fatalf("enabling BPF statistics: %v", err)
			}
			defer stats.Close()
			py := testworkload.PyenvPython(b, bc.minor)
			cmd := testworkload.Start(b, py.Path, append([]string{testworkload.PythonScript(b, bc.script)}, bc.args...)...)
			time.Sleep(300 * time.Millisecond)
			run := startPythonRun(b, func(c *Config, r *profilesReceiver) {
				r.hooks.samplePID = cmd.Process.Pid
				if bc.noInterp {
					c.Interpreters = []string{}
				}
			})
			if !bc.noInterp {
				run.waitAttached(cmd)
			}
			time.Sleep(time.Second)
			measureBPFTime(b, run)
		})
	}
}

// measureBPFTime reports the BPF time per sample of run's sampler over the
// benchmark's loop, a second per iteration: run samples one process
// alone (hooks.samplePID), BPF statistics enabled by the caller.
func measureBPFTime(b *testing.B, run *pythonRun) {
	rt0, n0, _ := run.r.sampler.RunStats()
	for b.Loop() {
		time.Sleep(time.Second)
	}
	rt1, n1, _ := run.r.sampler.RunStats()
	run.stop()
	if n1-n0 < 50 {
		b.Fatalf("%d samples in the window", n1-n0)
	}
	b.ReportMetric(float64(rt1-rt0)/float64(n1-n0)/1e3, "bpf_us/sample")
	b.ReportMetric(float64(n1-n0), "samples")
}
