// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// On-CPU stack sampler: one perf_event program per CPU on the software
// cpu-clock. Each sample carries both stacks, copied with bpf_get_stack into
// the record itself, so no stack-id hash table can collide and drop one.
// Records go to a ringbuf that user space drains; every sample that cannot
// be recorded is counted.

#include "bpfcol_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define MAX_STACK_DEPTH 127

// Counter indexes, generated for Go by bpf2go (-type counter).
enum counter {
	COUNTER_SAMPLES = 0,       // samples recorded
	COUNTER_DROPPED_RINGBUF,   // ringbuf full: sample lost
	COUNTER_USER_STACK_ERR,    // user stack could not be read
	COUNTER_KERNEL_STACK_ERR,  // kernel stack could not be read
	COUNTER_SP_READ_ERR,       // the words at the user SP could not be read
	COUNTER_IDLE,              // sample on the idle task: not recorded
	COUNTER_MAX,
};

struct sample {
	u64 ktime_ns;
	u32 pid; // tgid
	u32 tid;
	u32 cpu;
	u32 flags;
	s32 kernel_bytes; // bytes of kernel[] filled, or a negative errno
	s32 user_bytes;   // bytes of user[] filled, or a negative errno
	// User registers at the sample, and the two words at the user SP: the
	// return address of a function that has not pushed a frame sits there,
	// and frame-pointer walking cannot see it.
	u64 user_ip;
	u64 user_sp;
	u64 user_bp;
	u64 sp_words[2];
	char comm[16];
	u64 kernel[MAX_STACK_DEPTH];
	u64 user[MAX_STACK_DEPTH];
};

// Flags of a sample, generated for Go by bpf2go (-type sample_flag).
enum sample_flag {
	SAMPLE_KERNEL_THREAD = 1U << 0,
	SAMPLE_SP_WORDS_VALID = 1U << 1,
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); // resized by the loader
} samples SEC(".maps");

#include "bpfcol_counters.h"

// Anchor the record and flag types in BTF so bpf2go can mirror them in Go;
// they cost 8 bytes each of one .bss map.
const struct sample *unused_sample __attribute__((unused));
const enum sample_flag *unused_sample_flag __attribute__((unused));

SEC("perf_event")
int sample_stack(void *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tid = (u32)pid_tgid;
	if (tid == 0) {
		count(COUNTER_IDLE);
		return 0;
	}

	struct sample *s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		count(COUNTER_DROPPED_RINGBUF);
		return 0;
	}

	s->ktime_ns = bpf_ktime_get_ns();
	s->pid = pid_tgid >> 32;
	s->tid = tid;
	s->cpu = bpf_get_smp_processor_id();
	s->flags = 0;
	s->user_ip = 0;
	s->user_sp = 0;
	s->user_bp = 0;
	s->sp_words[0] = 0;
	s->sp_words[1] = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));

	s->kernel_bytes = bpf_get_stack(ctx, s->kernel, sizeof(s->kernel), 0);
	// A sample taken in user mode has no kernel stack: that is not an error.
	if (s->kernel_bytes < 0 && s->kernel_bytes != -14 /* EFAULT */)
		count(COUNTER_KERNEL_STACK_ERR);

	struct task_struct *task = bpf_get_current_task_btf();
	if (task->flags & PF_KTHREAD) {
		s->flags |= SAMPLE_KERNEL_THREAD;
		s->user_bytes = 0;
	} else {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
		s->user_ip = regs->ip;
		s->user_sp = regs->sp;
		s->user_bp = regs->bp;
		if (bpf_probe_read_user(s->sp_words, sizeof(s->sp_words), (void *)s->user_sp) == 0)
			s->flags |= SAMPLE_SP_WORDS_VALID;
		else
			count(COUNTER_SP_READ_ERR);
		s->user_bytes = bpf_get_stack(ctx, s->user, sizeof(s->user), BPF_F_USER_STACK);
		if (s->user_bytes < 0)
			count(COUNTER_USER_STACK_ERR);
	}

	count(COUNTER_SAMPLES);
	// User space drains on a short timer, so a sample wakes it only when
	// the ringbuf is half full: no wakeup (and no context switch) per
	// sample, and still no loss under bursts.
	u64 wakeup = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&samples, BPF_RB_RING_SIZE) / 2)
		wakeup = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(s, wakeup);
	return 0;
}
