/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The few kernel types bpfcol's BPF programs touch, declared with
 * preserve_access_index so every field access is relocated against the
 * running kernel's BTF (CO-RE). A full vmlinux.h is megabytes of types we
 * never use, and would tie the committed objects to one kernel build.
 */
#ifndef BPFCOL_TYPES_H
#define BPFCOL_TYPES_H

typedef unsigned char __u8;
typedef short int __s16;
typedef short unsigned int __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long int __s64;
typedef long long unsigned int __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_F_NO_PREALLOC = (1U << 0),
	BPF_F_MMAPABLE = (1U << 10),
	BPF_F_RDONLY_PROG = (1U << 7),
};

enum {
	BPF_F_SKIP_FIELD_MASK = 0xffULL,
	BPF_F_USER_STACK = (1ULL << 8),
};

enum {
	BPF_RB_NO_WAKEUP = (1ULL << 0),
	BPF_RB_FORCE_WAKEUP = (1ULL << 1),
};

enum {
	BPF_RB_AVAIL_DATA = 0,
	BPF_RB_RING_SIZE = 1,
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = (1ULL << 0),
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

#include "bpfcol_arch.h"

/* include/uapi/linux/bpf.h: the context of raw tracepoint programs. */
struct bpf_raw_tracepoint_args {
	__u64 args[0];
};

typedef struct {
	int counter;
} atomic_t;

/* Only live is read: it drops to zero when the last thread of a group exits. */
struct signal_struct {
	atomic_t live;
} __attribute__((preserve_access_index));

struct mm_struct;

struct task_struct {
	unsigned int flags;
	struct mm_struct *mm;
	int pid;
	int tgid;
	struct task_struct *group_leader;
	char comm[16];
	struct signal_struct *signal;
} __attribute__((preserve_access_index));

/* include/linux/sched.h */
#define PF_EXITING 0x00000004
#define PF_IO_WORKER 0x00000010
#define PF_USER_WORKER 0x00004000
#define PF_KTHREAD 0x00200000

/* include/uapi/linux/bpf.h (6.18): embedded in a map value, the kernel's
 * handle of a task work scheduled with bpf_task_work_schedule_*. */
struct bpf_task_work {
	__u64 __opaque;
} __attribute__((aligned(8)));

/* UAPI: a dynamic pointer, here to a ringbuf record of a size known only
 * at run time (bpf_ringbuf_reserve_dynptr, 5.19). */
struct bpf_dynptr {
	__u64 __opaque[2];
} __attribute__((aligned(8)));

#endif /* BPFCOL_TYPES_H */
