package profiler

import (
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

// BenchmarkSamplerLoad loads the sampler's programs as New does, on-CPU
// alone and with off-CPU, and reports what the verifier says it spent on
// each: the instructions it processed and its time. These are most of the
// sampler's start-up cost. It fails unless every program loaded and the
// verifier reported both figures.
func BenchmarkSamplerLoad(b *testing.B) {
	testenv.RequireBPF(b)
	for _, bc := range []struct {
		name   string
		offCPU bool
		progs  []string
	}{
		{"on-cpu", false, []string{profilerProgSampleStack}},
		{"off-cpu", true, []string{profilerProgSampleStack, profilerProgOffCpuSwitch, profilerProgOffCpuExit}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			insns, usec := map[string]int{}, map[string]int{}
			for b.Loop() {
				spec, err := loadProfiler()
				if err != nil {
					b.Fatal(err)
				}
				spec.Maps[profilerMapSamples].MaxEntries = ringBufferSize(Options{Frequency: 20}, 2)
				if err := configureOffCPU(spec, OffCPUOptions{Enabled: bc.offCPU, Probability: 0.01}); err != nil {
					b.Fatal(err)
				}
				keep := map[string]bool{}
				for _, p := range bc.progs {
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
					b.Fatal(err)
				}
				for _, p := range bc.progs {
					log := coll.Programs[p].VerifierLog
					mi, mt := verifierInsns.FindStringSubmatch(log), verifierTime.FindStringSubmatch(log)
					if mi == nil || mt == nil {
						coll.Close()
						b.Fatalf("%s: no verifier statistics in its log:\n%s", p, log)
					}
					insns[p], _ = strconv.Atoi(mi[1])
					usec[p], _ = strconv.Atoi(mt[1])
				}
				coll.Close()
			}
			for _, p := range bc.progs {
				b.ReportMetric(float64(insns[p]), p+"_insns")
				b.ReportMetric(float64(usec[p])/1000, p+"_verify_ms")
			}
		})
	}
}
