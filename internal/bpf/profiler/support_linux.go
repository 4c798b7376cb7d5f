package profiler

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/bpfcol/bpfcol/internal/bpf/capability"
	"github.com/bpfcol/bpfcol/internal/bpf/support"
)

// CheckSupport reports, by name, the first capability or kernel feature the
// sampler needs and does not have.
func CheckSupport() error {
	return support.Check(
		support.Capabilities("loading needs CAP_BPF, system-wide perf events CAP_PERFMON", capability.BPF, capability.Perfmon),
		support.KernelBTF,
		support.ProgramType("perf_event BPF programs", ebpf.PerfEvent),
		support.MapType("BPF ringbuf maps (kernel 5.8)", ebpf.RingBuf),
		support.Helper("helper bpf_get_stack", ebpf.PerfEvent, asm.FnGetStack),
		support.Helper("helper bpf_get_current_task_btf (kernel 5.11)", ebpf.PerfEvent, asm.FnGetCurrentTaskBtf),
		support.Helper("helper bpf_task_pt_regs (kernel 5.15)", ebpf.PerfEvent, asm.FnTaskPtRegs),
	)
}

var explainPermission = support.ExplainPermission
