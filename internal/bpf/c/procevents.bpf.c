// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Process lifecycle events for discovery: one record when a process execs
// a new image and one when its last thread exits, through a ringbuf, so user
// space never polls /proc. Raw tracepoints need no tracefs. An exec record
// carries the identity of the executed file (device, inode, size, mtime) so
// user space can answer a known binary without a syscall.

#include "bpfcol_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Event kinds, generated for Go by bpf2go (-type proc_event_kind).
enum proc_event_kind {
	PROC_EVENT_EXEC = 1,
	PROC_EVENT_EXIT = 2,
};

// Counter indexes, generated for Go by bpf2go (-type counter).
enum counter {
	COUNTER_EVENTS = 0,
	COUNTER_LOST_RINGBUF,
	COUNTER_MAX,
};

struct proc_event {
	u32 pid;
	u32 kind; // enum proc_event_kind
	// Exec only, all zero when unknown: the executed file as stat(2) sees
	// it, dev in the kernel's internal encoding (major << 20 | minor).
	u64 exe_dev;
	u64 exe_ino;
	s64 exe_size;
	s64 exe_mtime_sec;
	u64 exe_mtime_nsec;
};

// The fields read from the executed file, relocated by CO-RE.
struct super_block {
	u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
	struct super_block *i_sb;
	unsigned long i_ino;
	s64 i_size;
	s64 i_mtime_sec; // 6.7+: older kernels leave the identity unknown
	u32 i_mtime_nsec;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct linux_binprm {
	struct file *file;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} proc_events SEC(".maps");

#include "bpfcol_counters.h"

const struct proc_event *unused_proc_event __attribute__((unused));
const enum proc_event_kind *unused_proc_event_kind __attribute__((unused));

static __always_inline struct proc_event *reserve(u32 pid, u32 kind)
{
	struct proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_LOST_RINGBUF);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->pid = pid;
	e->kind = kind;
	return e;
}

static __always_inline void submit(struct proc_event *e)
{
	bpf_ringbuf_submit(e, 0);
	count(COUNTER_EVENTS);
}

// sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
// runs in the context of the process that exec'd.
SEC("raw_tracepoint/sched_process_exec")
int on_exec(struct bpf_raw_tracepoint_args *ctx)
{
	struct proc_event *e = reserve(bpf_get_current_pid_tgid() >> 32, PROC_EVENT_EXEC);
	if (!e)
		return 0;
	struct linux_binprm *bprm = (struct linux_binprm *)ctx->args[2];
	struct inode *inode = BPF_CORE_READ(bprm, file, f_inode);
	if (inode && bpf_core_field_exists(inode->i_mtime_sec)) {
		e->exe_dev = BPF_CORE_READ(inode, i_sb, s_dev);
		e->exe_ino = BPF_CORE_READ(inode, i_ino);
		e->exe_size = BPF_CORE_READ(inode, i_size);
		e->exe_mtime_sec = BPF_CORE_READ(inode, i_mtime_sec);
		e->exe_mtime_nsec = BPF_CORE_READ(inode, i_mtime_nsec);
	}
	submit(e);
	return 0;
}

// sched_process_exit fires for every exiting thread, in its own context,
// after it dropped signal->live: the process is gone once live is zero.
SEC("raw_tracepoint/sched_process_exit")
int on_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	struct proc_event *e = reserve(bpf_get_current_pid_tgid() >> 32, PROC_EVENT_EXIT);
	if (e)
		submit(e);
	return 0;
}
