/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * How many return probes the kernel keeps pending on a thread: a call
 * entered when MAX_URETPROBE_DEPTH are pending runs its entry probes but
 * returns unseen (kernel/events/uprobes.c, prepare_uretprobe). Types are
 * CO-RE flavors of the kernel's, so they relocate against its BTF.
 */
#ifndef BPFCOL_URETPROBE_H
#define BPFCOL_URETPROBE_H

#include <bpf/bpf_core_read.h>

/* include/linux/uprobes.h: unchanged since 3.x. */
#define MAX_URETPROBE_DEPTH 64

struct uprobe_task___bpfcol {
	unsigned int depth; /* return instances pending */
} __attribute__((preserve_access_index));

struct task_struct___bpfcol_utask {
	struct uprobe_task___bpfcol *utask;
} __attribute__((preserve_access_index));

/* return_unprobed reports whether the kernel will not hook the return of
 * the call task is entering: MAX_URETPROBE_DEPTH return probes (ours, and
 * any other tool's) are pending on the thread. The kernel counts this
 * call's own return probe after the entry programs ran. A kernel without
 * the fields says no. */
static __always_inline bool return_unprobed(struct task_struct *task)
{
	if (!bpf_core_field_exists(struct task_struct___bpfcol_utask, utask) ||
	    !bpf_core_field_exists(struct uprobe_task___bpfcol, depth))
		return false;
	struct uprobe_task___bpfcol *ut = ((struct task_struct___bpfcol_utask *)task)->utask;
	if (!ut)
		return false;
	return ut->depth >= MAX_URETPROBE_DEPTH;
}

#endif /* BPFCOL_URETPROBE_H */
