// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Process lifecycle events for discovery: one record when a process execs
// a new image and one when its last thread exits, through a ringbuf, so user
// space never polls /proc. Raw tracepoints need no tracefs.

#include "bpfcol_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Event kinds, mirrored in Go (procwatch).
#define PROC_EVENT_EXEC 1
#define PROC_EVENT_EXIT 2

enum counter {
	COUNTER_EVENTS = 0,
	COUNTER_LOST_RINGBUF,
	COUNTER_MAX,
};

struct proc_event {
	u32 pid;
	u32 kind; // PROC_EVENT_*
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} proc_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, u32);
	__type(value, u64);
} counters SEC(".maps");

const struct proc_event *unused_proc_event __attribute__((unused));

static __always_inline void count(enum counter c)
{
	u32 key = c;
	u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		*v += 1;
}

static __always_inline void emit(u32 pid, u32 kind)
{
	struct proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_LOST_RINGBUF);
		return;
	}
	e->pid = pid;
	e->kind = kind;
	bpf_ringbuf_submit(e, 0);
	count(COUNTER_EVENTS);
}

// sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
// runs in the context of the process that exec'd.
SEC("raw_tracepoint/sched_process_exec")
int on_exec(struct bpf_raw_tracepoint_args *ctx)
{
	emit(bpf_get_current_pid_tgid() >> 32, PROC_EVENT_EXEC);
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
	emit(bpf_get_current_pid_tgid() >> 32, PROC_EVENT_EXIT);
	return 0;
}
