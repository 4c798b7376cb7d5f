/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The kernel's vDSO, for the user stack walk: one table for every process.
 *
 * Each 64-bit process maps the same vDSO image, wherever its mm says
 * (mm->context.vdso), so its CFI is one table, not one per process: its
 * rows are kept at the end of the row store, past the rows the loader
 * hands out to files (internal/bpf/profiler), and unwind_vdso holds
 * where they are, with start, end and table_base relative to the image's
 * first byte. The walk looks a PC up there first, so no per-process table
 * needs to carry the vDSO. Written once at start by user space
 * (internal/unwind/loader, vdso.go); row_count 0 until then.
 */
#ifndef BPFCOL_VDSO_H
#define BPFCOL_VDSO_H

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct unwind_mapping);
} unwind_vdso SEC(".maps");

/* x86: mm_context_t, a typedef'd anonymous struct in the kernel. */
struct vdso_image___bpfcol {
	unsigned long size;
} __attribute__((preserve_access_index));

struct mm_context___vdso {
	void *vdso;
	const struct vdso_image___bpfcol *vdso_image;
} __attribute__((preserve_access_index));

struct mm_struct___vdso {
	struct mm_context___vdso context;
} __attribute__((preserve_access_index));

/* vdso_base returns where task's process maps the vDSO whose table
 * unwind_vdso holds, or 0: none, another image (a 32-bit process's), or
 * a kernel without the field. */
static __always_inline u64 vdso_base(struct task_struct *task, struct unwind_mapping *vdso)
{
	if (!vdso || !vdso->row_count || !bpf_core_field_exists(((struct mm_struct___vdso *)0)->context.vdso))
		return 0;
	struct mm_struct___vdso *mm = (void *)task->mm;
	if (!mm)
		return 0;
	if (bpf_core_field_exists(((struct mm_struct___vdso *)0)->context.vdso_image)) {
		const struct vdso_image___bpfcol *image = mm->context.vdso_image;
		if (!image || image->size != vdso->end)
			return 0;
	}
	return (u64)mm->context.vdso;
}

#endif /* BPFCOL_VDSO_H */
