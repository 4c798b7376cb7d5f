// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Process lifecycle events for discovery: one record when a process execs
// a new image, one when its last thread exits, and one when it maps a file
// executable (the exec itself, ld.so loading libraries, dlopen), through a
// ringbuf, so user space never polls /proc. Raw tracepoints need no tracefs.
// Exec and mapping records carry the identity of the file (device, inode,
// size, mtime) so user space can answer a known binary without a syscall,
// and every record the ktime it happened at, to measure attach latency.
//
// Mappings are seen by the BPF LSM hook mmap_file (5.7+, "bpf" in the
// active LSMs), which runs in the mapping process before the mapping exists:
// user space learns of a library before its code can run. The sleepable
// variant names the file with bpf_d_path. Without BPF LSM, fentry on
// security_mmap_file (5.5+ trampolines) sees the same calls without a path.
// Where neither loads (kernel lockdown refuses both on some machines), the
// raw syscall tracepoint sys_exit sees mmap(2) returning with PROT_EXEC: the
// mapping exists then, and the process has not run its code yet. It costs a
// compare on every syscall. execve's own mappings are not syscalls, so only
// the first two sources see them.

#include "bpfcol_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Event kinds, generated for Go by bpf2go (-type proc_event_kind).
enum proc_event_kind {
	PROC_EVENT_EXEC = 1,
	PROC_EVENT_EXIT = 2,
	PROC_EVENT_MMAP_EXEC = 3,
};

// Event flags, generated for Go by bpf2go (-type proc_event_flag).
enum proc_event_flag {
	// The mapping was made by execve itself (the executable or ld.so).
	PROC_EVENT_IN_EXECVE = 1,
	// path holds the file's path as the process sees it.
	PROC_EVENT_HAS_PATH = 2,
};

#define PROC_EVENT_PATH_MAX 256
#define PROT_EXEC 0x4

// Counter indexes, generated for Go by bpf2go (-type counter).
enum counter {
	COUNTER_EVENTS = 0,
	COUNTER_LOST_RINGBUF,
	COUNTER_MAX,
};

struct proc_event {
	u32 pid;
	u32 kind; // enum proc_event_kind
	// Exec and mapping only, all zero when unknown: the executed or mapped
	// file as stat(2) sees it, dev in the kernel's internal encoding
	// (major << 20 | minor).
	u64 exe_dev;
	u64 exe_ino;
	s64 exe_size;
	s64 exe_mtime_sec;
	u64 exe_mtime_nsec;
	// When it happened, bpf_ktime_get_ns (CLOCK_MONOTONIC).
	u64 ktime;
	u32 flags; // enum proc_event_flag
	// Exec only: the parent's tgid, whose cwd a relative path was most
	// likely given against (user space checks the file's identity).
	u32 ppid;
	// Exec and mapping, with PROC_EVENT_HAS_PATH: NUL-terminated; an exec's
	// path is as given to execve, so it may be relative.
	char path[PROC_EVENT_PATH_MAX];
};

// The fields read from the executed file, relocated by CO-RE.
struct super_block {
	u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
	struct super_block *i_sb;
	unsigned long i_ino;
	s64 i_size;
	s64 i_mtime_sec; // 6.11+
	u32 i_mtime_nsec;
} __attribute__((preserve_access_index));

// The modification time as older kernels keep it: a timespec64 named
// __i_mtime (6.7 to 6.10) or i_mtime (before 6.7, as Debian 12's 6.1).
struct timespec64 {
	s64 tv_sec;
	long tv_nsec;
} __attribute__((preserve_access_index));

struct inode___timespec {
	struct timespec64 __i_mtime;
} __attribute__((preserve_access_index));

struct inode___timespec_old {
	struct timespec64 i_mtime;
} __attribute__((preserve_access_index));

struct path {
	void *mnt;
	void *dentry;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
	struct path f_path;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

// The task fields read here, under a flavor name so the shared
// task_struct declaration stays as it is.
struct task_struct___procevents {
	unsigned int in_execve : 1;
	struct files_struct *files;
	struct task_struct___procevents *real_parent;
	int tgid;
} __attribute__((preserve_access_index));

struct linux_binprm {
	struct file *file;
	const char *interp;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} proc_events SEC(".maps");

#include "bpfcol_counters.h"

const struct proc_event *unused_proc_event __attribute__((unused));
const enum proc_event_kind *unused_proc_event_kind __attribute__((unused));
const enum proc_event_flag *unused_proc_event_flag __attribute__((unused));

static __always_inline struct proc_event *reserve(u32 pid, u32 kind)
{
	struct proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_LOST_RINGBUF);
		return NULL;
	}
	// The path is written only when known: user space reads it up to the
	// first NUL, and only with PROC_EVENT_HAS_PATH.
	__builtin_memset(e, 0, __builtin_offsetof(struct proc_event, path));
	e->path[0] = 0;
	e->pid = pid;
	e->kind = kind;
	e->ktime = bpf_ktime_get_ns();
	return e;
}

static __always_inline void read_identity(struct proc_event *e, struct inode *inode)
{
	if (!inode)
		return;
	if (bpf_core_field_exists(inode->i_mtime_sec)) {
		e->exe_mtime_sec = BPF_CORE_READ(inode, i_mtime_sec);
		e->exe_mtime_nsec = BPF_CORE_READ(inode, i_mtime_nsec);
	} else if (bpf_core_field_exists(((struct inode___timespec *)inode)->__i_mtime)) {
		struct inode___timespec *old = (void *)inode;
		e->exe_mtime_sec = BPF_CORE_READ(old, __i_mtime.tv_sec);
		e->exe_mtime_nsec = BPF_CORE_READ(old, __i_mtime.tv_nsec);
	} else if (bpf_core_field_exists(((struct inode___timespec_old *)inode)->i_mtime)) {
		struct inode___timespec_old *old = (void *)inode;
		e->exe_mtime_sec = BPF_CORE_READ(old, i_mtime.tv_sec);
		e->exe_mtime_nsec = BPF_CORE_READ(old, i_mtime.tv_nsec);
	} else {
		return; // the identity stays unknown: user space reads /proc
	}
	e->exe_dev = BPF_CORE_READ(inode, i_sb, s_dev);
	e->exe_ino = BPF_CORE_READ(inode, i_ino);
	e->exe_size = BPF_CORE_READ(inode, i_size);
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
	read_identity(e, BPF_CORE_READ(bprm, file, f_inode));
	// The path execve resolved, as the process sees it (the interpreter's
	// for a script): a short process is often gone before user space could
	// read /proc/PID/exe.
	const char *interp = BPF_CORE_READ(bprm, interp);
	if (interp && bpf_probe_read_kernel_str(e->path, sizeof(e->path), interp) > 0)
		e->flags |= PROC_EVENT_HAS_PATH;
	struct task_struct___procevents *task = (void *)bpf_get_current_task();
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
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

// mapped records an executable file mapping. Only PROT_EXEC file mappings
// can bring code to probe; anonymous ones (JIT) cannot be uprobed.
static __always_inline struct proc_event *mapped(struct file *file, unsigned long prot)
{
	if (!file || !(prot & PROT_EXEC))
		return NULL;
	struct proc_event *e = reserve(bpf_get_current_pid_tgid() >> 32, PROC_EVENT_MMAP_EXEC);
	if (!e)
		return NULL;
	read_identity(e, BPF_CORE_READ(file, f_inode));
	struct task_struct___procevents *task = (void *)bpf_get_current_task();
	if (BPF_CORE_READ_BITFIELD_PROBED(task, in_execve))
		e->flags |= PROC_EVENT_IN_EXECVE;
	return e;
}

// security_mmap_file(file, reqprot, prot, flags) as a sleepable BPF LSM
// program: it may call bpf_d_path. It never denies (returns 0).
// Arguments: file, reqprot, prot, flags, and the previous LSM's verdict.
SEC("lsm.s/mmap_file")
int on_mmap_file(u64 *ctx)
{
	struct file *file = (struct file *)ctx[0];
	unsigned long prot = ctx[2];
	int ret = ctx[4];
	if (ret)
		return ret; // another LSM refused: nothing will be mapped
	struct proc_event *e = mapped(file, prot);
	if (!e)
		return 0;
	if (bpf_d_path(&file->f_path, e->path, sizeof(e->path)) > 0)
		e->flags |= PROC_EVENT_HAS_PATH;
	submit(e);
	return 0;
}

// The same calls seen by fentry where BPF LSM is not active: no path, user
// space reads it from /proc/PID/maps.
// Arguments: file, prot, flags.
SEC("fentry/security_mmap_file")
int on_mmap_file_fentry(u64 *ctx)
{
	struct proc_event *e = mapped((struct file *)ctx[0], ctx[1]);
	if (e)
		submit(e);
	return 0;
}

// sys_exit(struct pt_regs *regs, long ret): the registers saved at syscall
// entry still hold mmap's arguments (prot the third, fd the fifth).
SEC("raw_tracepoint/sys_exit")
int on_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
	if (REGS_SYSCALL_NR(regs) != NR_MMAP)
		return 0;
	long ret = ctx->args[1];
	unsigned long prot = REGS_SYSCALL_ARG3(regs);
	if (!(prot & PROT_EXEC) || (ret < 0 && ret > -4096))
		return 0;
	int fd = REGS_SYSCALL_ARG5(regs);
	if (fd < 0)
		return 0;
	struct task_struct___procevents *task = (void *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *file = NULL;
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	struct proc_event *e = mapped(file, prot);
	if (e)
		submit(e);
	return 0;
}
