//go:build linux && (amd64 || arm64)

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
		support.BTFTracepoint("tp_btf/sched_process_exit", "sched_process_exit", 1),
	)
}

// CheckOffCPUSupport reports, by name, the first kernel feature off-CPU
// events need and lack: tp_btf/sched_switch with its prev_state argument
// (kernel 5.18), sched_process_exit, and bpf_loop for the CFI walk (5.17).
func CheckOffCPUSupport() error {
	return support.Check(
		support.BTFTracepoint("tp_btf/sched_switch with prev_state (kernel 5.18)", "sched_switch", 4),
		support.BTFTracepoint("tp_btf/sched_process_exit", "sched_process_exit", 1),
		support.Helper("helper bpf_loop (kernel 5.17)", ebpf.PerfEvent, asm.FnLoop),
	)
}

// CheckOffCPUTaskWork reports whether the kernel can defer the user stack
// walk of an off-CPU event to the thread's return to user space, out of
// sched_switch: the task work kfuncs (kernel 6.18). Without them off-CPU
// events still work, at a higher cost per sampled context switch.
func CheckOffCPUTaskWork() error {
	return support.Check(
		support.Kfunc("kfunc bpf_task_work_schedule_resume_impl (kernel 6.18)", "bpf_task_work_schedule_resume_impl"),
	)
}

// CheckCompose reports whether BPF can read a process's mappings itself,
// when it is first sampled: in a task work (kernel 6.18), with the VMA
// iterator (6.7). Without them user space reads /proc/PID/maps, asked by a
// notice, and the first samples of a process are walked with frame
// pointers until it has.
func CheckCompose() error {
	return support.Check(
		support.Kfunc("kfunc bpf_task_work_schedule_resume_impl (kernel 6.18)", "bpf_task_work_schedule_resume_impl"),
		support.Kfunc("kfunc bpf_iter_task_vma_new (kernel 6.7)", "bpf_iter_task_vma_new"),
	)
}

// composeInBPF is CheckCompose, replaced in tests to run the sampler that
// leaves reading mappings to user space on a kernel that has both.
var composeInBPF = CheckCompose

// offCPUTaskWork is CheckOffCPUTaskWork, replaced in tests to load the
// walk-in-switch programs on a kernel that has task work.
var offCPUTaskWork = CheckOffCPUTaskWork

var explainPermission = support.ExplainPermission
