/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Return addresses that uretprobes replaced, for the user stack walk.
 *
 * A function under a uretprobe (the uprobe receiver's `exit: return`, or
 * anyone's: bpftrace, another profiler) returns through a trampoline: at
 * the function's entry the kernel wrote the trampoline's address, the first
 * byte of the process's [uprobes] page, over the return address on the
 * stack, and kept the real one in a return instance of the thread's uprobe
 * task, with the stack pointer at the entry, which points at that slot.
 * A walk that reads the trampoline from a slot takes the real address from
 * the instance of that slot; a tail call's instances share the slot and
 * the address. Every field read is relocated against the running kernel
 * (CO-RE) and checked: a kernel without them gives a counted cut
 * (UNWIND_STOP_URETPROBE).
 */
#ifndef BPFCOL_URETPROBE_H
#define BPFCOL_URETPROBE_H

struct xol_area {
	unsigned long vaddr; /* the trampoline is its first slot */
} __attribute__((preserve_access_index));

struct uprobes_state {
	struct xol_area *xol_area; /* set once a uprobe hit the process */
} __attribute__((preserve_access_index));

struct mm_struct___uprobes {
	struct uprobes_state uprobes_state;
} __attribute__((preserve_access_index));

/* Newest first. */
struct return_instance {
	unsigned long stack;          /* SP at the function's entry: the slot */
	unsigned long orig_ret_vaddr; /* the return address it held */
	struct return_instance *next;
} __attribute__((preserve_access_index));

struct uprobe_task {
	unsigned int depth; /* return instances pending */
	struct return_instance *return_instances;
	unsigned long vaddr;     /* the probed instruction being single-stepped */
	unsigned long xol_vaddr; /* its copy in [uprobes] that is stepped */
} __attribute__((preserve_access_index));

struct task_struct___uprobes {
	struct uprobe_task *utask;
	struct mm_struct___uprobes *mm;
} __attribute__((preserve_access_index));

/* The kernel's MAX_URETPROBE_DEPTH (include/linux/uprobes.h, unchanged
 * since 3.x): a call entered when this many return probes are pending on
 * the thread runs its entry probes but returns unseen, keeping its return
 * address (kernel/events/uprobes.c, prepare_uretprobe). */
#define URETPROBE_MAX_DEPTH 64

/* return_unprobed reports whether the kernel will not hook the return of
 * the call task is entering: URETPROBE_MAX_DEPTH return probes (ours, and
 * any other tool's) are pending on the thread. The kernel counts this
 * call's own return probe after the entry programs ran. A kernel without
 * the fields says no. */
static __always_inline bool return_unprobed(struct task_struct *task)
{
	if (!bpf_core_field_exists(((struct task_struct___uprobes *)0)->utask) ||
	    !bpf_core_field_exists(((struct uprobe_task *)0)->depth))
		return false;
	struct uprobe_task *ut = ((struct task_struct___uprobes *)task)->utask;
	if (!ut)
		return false;
	return ut->depth >= URETPROBE_MAX_DEPTH;
}

/* uretprobe_trampoline returns the address of the uretprobe trampoline
 * of task's process, 0 while no uprobe has hit it (or in a kernel without
 * uprobes). */
static __always_inline u64 uretprobe_trampoline(struct task_struct *task)
{
	if (!bpf_core_field_exists(((struct mm_struct___uprobes *)0)->uprobes_state) ||
	    !bpf_core_field_exists(((struct xol_area *)0)->vaddr))
		return 0;
	struct mm_struct___uprobes *mm = ((struct task_struct___uprobes *)task)->mm;
	if (!mm)
		return 0;
	struct xol_area *area = mm->uprobes_state.xol_area;
	if (!area)
		return 0;
	return area->vaddr;
}

/* uretprobe_return returns the return address a uretprobe's trampoline
 * replaced for the instance keyed by slot (URETPROBE_SLOT), of the
 * current thread, or 0: none
 * found, or a kernel that names the fields otherwise. A global function:
 * the verifier checks its loop once. */
__noinline u64 uretprobe_return(u64 slot)
{
	if (!bpf_core_field_exists(((struct task_struct___uprobes *)0)->utask) ||
	    !bpf_core_field_exists(((struct uprobe_task *)0)->return_instances) ||
	    !bpf_core_field_exists(((struct return_instance *)0)->stack) ||
	    !bpf_core_field_exists(((struct return_instance *)0)->orig_ret_vaddr) ||
	    !bpf_core_field_exists(((struct return_instance *)0)->next))
		return 0;
	struct task_struct___uprobes *task = (void *)bpf_get_current_task_btf();
	struct uprobe_task *ut = task->utask;
	if (!ut)
		return 0;
	struct return_instance *ri = ut->return_instances;
	for (int i = 0; i < URETPROBE_MAX_DEPTH && ri; i++) {
		if (ri->stack == slot)
			return ri->orig_ret_vaddr;
		ri = ri->next;
	}
	return 0;
}

/* The trampoline's code is shorter than this. */
#define URETPROBE_TRAMPOLINE_BYTES 32

/* uretprobe_returned moves a walk that starts inside the trampoline (a
 * sample taken while the kernel runs a probed function's return probes) to
 * where that function returns, the caller of the instance it returns
 * through: *pc its return address, *sp right above the slot it was in.
 * x86's trampoline since 6.11 pushes three registers and makes a system
 * call, so the slot is 16 bytes above the SP there; before, it trapped at
 * its first byte, 8 bytes above the slot. It returns false when no
 * instance matches. */
static __always_inline bool uretprobe_returned(u64 *pc, u64 *sp)
{
	if (HAS_LINK_REGISTER) {
		// arm64's trampoline traps at its first instruction, the SP
		// being the probed function's at entry.
		u64 ret = uretprobe_return(*sp);
		if (ret)
			*pc = ret;
		return ret != 0;
	}
	u64 slot = *sp + 16;
	u64 ret = uretprobe_return(slot);
	if (!ret) {
		slot = *sp - 8;
		ret = uretprobe_return(slot);
	}
	if (!ret)
		return false;
	*pc = ret;
	*sp = slot + 8;
	return true;
}

/* An instruction copied out of line is shorter than this. */
#define UPROBE_XOL_BYTES 16

/* uprobe_stepped_pc returns where pc, in [uprobes], is in the function
 * probed there: a sample taken while the kernel single-steps a probed
 * instruction (one it cannot emulate, such as endbr64) in a copy of it out
 * of line. It returns pc when it is no such copy. */
static __always_inline u64 uprobe_stepped_pc(u64 pc)
{
	if (!bpf_core_field_exists(((struct task_struct___uprobes *)0)->utask) ||
	    !bpf_core_field_exists(((struct uprobe_task *)0)->vaddr) ||
	    !bpf_core_field_exists(((struct uprobe_task *)0)->xol_vaddr))
		return pc;
	struct task_struct___uprobes *task = (void *)bpf_get_current_task_btf();
	struct uprobe_task *ut = task->utask;
	if (!ut)
		return pc;
	u64 xol = ut->xol_vaddr;
	if (!xol || pc - xol >= UPROBE_XOL_BYTES)
		return pc;
	return ut->vaddr + (pc - xol);
}

#endif /* BPFCOL_URETPROBE_H */
