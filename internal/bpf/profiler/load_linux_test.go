//go:build linux && (amd64 || arm64)

package profiler

import (
	"errors"
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/bpfcol/bpfcol/internal/bpf/support"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

var (
	verifierInsns = regexp.MustCompile(`processed (\d+) insns`)
	verifierTime  = regexp.MustCompile(`verification time (\d+) usec`)
)

// verifierStats loads progs as New does, with off-CPU or not, and returns
// the instructions the verifier processed and its time in microseconds for
// each. It fails unless every program loaded and the verifier reported
// both figures.
func verifierStats(tb testing.TB, offCPU bool, progs []string) (insns, usec map[string]int) {
	tb.Helper()
	spec, err := loadProfiler()
	if err != nil {
		tb.Fatal(err)
	}
	spec.Maps[profilerMapSamples].MaxEntries = ringBufferSize(Options{Frequency: 20}, 2)
	if err := configureOffCPU(spec, OffCPUOptions{Enabled: offCPU, Probability: 0.01}, 0); err != nil {
		tb.Fatal(err)
	}
	// The CPython, HotSpot and V8 walks are verified too: they are the
	// larger load.
	if err := configurePython(spec, Options{Python: true}); err != nil {
		tb.Fatal(err)
	}
	if err := configureHotSpot(spec, Options{HotSpot: true}); err != nil {
		tb.Fatal(err)
	}
	if err := configureV8(spec, Options{V8: true}); err != nil {
		tb.Fatal(err)
	}
	keep := map[string]bool{}
	for _, p := range progs {
		keep[p] = true
	}
	for name := range spec.Programs {
		if !keep[name] {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
		Cache:    support.KernelTypes(),
	})
	if err != nil {
		// The whole verifier log: its end says which limit was hit.
		if ve := (*ebpf.VerifierError)(nil); errors.As(err, &ve) {
			tb.Fatalf("%v:\n%+v", err, ve)
		}
		tb.Fatal(err)
	}
	defer coll.Close()
	insns, usec = map[string]int{}, map[string]int{}
	for _, p := range progs {
		log := coll.Programs[p].VerifierLog
		mi, mt := verifierInsns.FindStringSubmatch(log), verifierTime.FindStringSubmatch(log)
		if mi == nil || mt == nil {
			tb.Fatalf("%s: no verifier statistics in its log:\n%s", p, log)
		}
		insns[p], _ = strconv.Atoi(mi[1])
		usec[p], _ = strconv.Atoi(mt[1])
	}
	return insns, usec
}

// onCPUPrograms are the programs New loads for on-CPU samples: with BPF
// task work, the sampler that reads a process's mappings itself (and the
// one that asks user space, loaded where it cannot); without, the latter
// alone. The exit program either way.
func onCPUPrograms(taskWork bool) []string {
	if taskWork {
		return []string{profilerProgSampleStack, profilerProgSampleStackUser, profilerProgProcExit}
	}
	return []string{profilerProgSampleStackUser, profilerProgProcExit}
}

// offCPUPrograms are the programs New loads with off-CPU: the pair that
// walks the user stack in task work, or the pair that walks it in
// sched_switch.
func offCPUPrograms(taskWork bool) []string {
	if taskWork {
		return []string{profilerProgSampleStack, profilerProgOffCpuSwitch, profilerProgOffCpuExit}
	}
	return []string{profilerProgSampleStackUser, profilerProgOffCpuSwitchWalk, profilerProgOffCpuExitWalk}
}

// TestSamplerVerifiedOnce checks that the verifier walks the CFI frame step
// once, not once per frame of the bpf_loop: walked per iteration (127
// frames), the programs took 150k and 300k instructions and most of the
// collector's start-up CPU. The bound leaves room for other kernels'
// verifiers and for the programs to grow: 25k since the HotSpot walk
// (hotspot_frame, a global function verified once, and the JVM's record
// path) took sample_stack from 13.0k to 21.0k instructions, and V8's
// frame step beside it (v8_frame, global too) to 23.7k, still one walk
// of the frame step; 27k since the sampler's row memo and stack window
// (stack_read, global too) took it from 24.9k to 26.4k; 28k since arm64's
// return address rules (the link register, frame records counted from SP)
// and the walk's flags packed in bits, which keep its registers within
// 6.1's 512 bytes of stack, took it to 27.0k. Every program the kernel can
// run loads: the sched_switch walk everywhere, the task-work pair where
// the kernel has BPF task work (6.18).
func TestSamplerVerifiedOnce(t *testing.T) {
	testenv.RequireBPF(t)
	const bound = 28_000
	variants := []bool{false}
	if err := offCPUTaskWork(); err == nil {
		variants = append(variants, true)
	} else {
		t.Logf("task-work programs not loaded: %v", err)
	}
	for _, taskWork := range variants {
		for _, progs := range [][]string{onCPUPrograms(taskWork), offCPUPrograms(taskWork)} {
			insns, _ := verifierStats(t, true, progs)
			for _, p := range progs {
				t.Logf("%s: %d instructions processed", p, insns[p])
				if insns[p] > bound {
					t.Errorf("%s: the verifier processed %d instructions, want at most %d", p, insns[p], bound)
				}
			}
		}
	}
}

// BenchmarkSamplerLoad loads the sampler's programs as New does, on-CPU
// alone and with off-CPU, and reports what the verifier says it spent on
// each: the instructions it processed and its time. These are most of the
// sampler's start-up cost.
func BenchmarkSamplerLoad(b *testing.B) {
	testenv.RequireBPF(b)
	for _, bc := range []struct {
		name   string
		offCPU bool
		progs  []string
	}{
		{"on-cpu", false, onCPUPrograms(offCPUTaskWork() == nil)},
		{"off-cpu", true, offCPUPrograms(offCPUTaskWork() == nil)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var insns, usec map[string]int
			for b.Loop() {
				insns, usec = verifierStats(b, bc.offCPU, bc.progs)
			}
			for _, p := range bc.progs {
				b.ReportMetric(float64(insns[p]), p+"_insns")
				b.ReportMetric(float64(usec[p])/1000, p+"_verify_ms")
			}
		})
	}
}
