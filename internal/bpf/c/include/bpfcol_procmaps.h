/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The unwinder's view of processes and files, kept by BPF itself.
 *
 * A process's executable mappings (unwind_procs) are read from its VMAs
 * when it is first sampled, in a BPF task work that runs in the process's
 * own context on its return to user space (the VMA iterator takes the
 * mmap lock, which a perf event's interrupt cannot); again when it exec'd
 * (another address space) or when a sample's walk finds them stale
 * (dlopen, new JIT code). Nothing happens at exec, fork or mmap: a process
 * never sampled costs nothing. Where the kernel lacks task work or the VMA
 * iterator, user space reads /proc/PID/maps instead, asked by the same
 * notice.
 *
 * A walk that enters a file with no table yet adds a pending entry for it
 * in unwind_files and tells user space at once (a notice), which builds
 * the table off the hot path; the entry is the deduplication. User space
 * hears of a process first sampled, with its mappings, and of its exit.
 *
 * Include after bpfcol_counters.h, with COUNTER_NOTICES_LOST,
 * COUNTER_FILES_FULL, COUNTER_PROCS_FULL, COUNTER_COMPOSE_BUSY and
 * COUNTER_COMPOSE_OVERFLOW in enum counter.
 */
#ifndef BPFCOL_PROCMAPS_H
#define BPFCOL_PROCMAPS_H

#include "bpfcol_unwind.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 2048); // resized by the loader
	__type(key, u32);          // tgid
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384); // resized by the loader
	__type(key, struct unwind_file_key);
	__type(value, struct unwind_file);
} unwind_files SEC(".maps");

// A process whose mappings are being read, by tgid: the read was asked at
// the value's time. A claim older than COMPOSE_CLAIM_NS (its task work
// never ran: the thread exited first) is taken over.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, u64);
} composing SEC(".maps");

#define COMPOSE_CLAIM_NS (50 * 1000 * 1000ULL)

// The least time between two reads of a process's mappings asked by its
// samples (an address outside them), doubled at each read up to the most:
// ld.so maps libraries within a millisecond of the exec, a JIT maps code
// for as long as it runs.
#define RECOMPOSE_MIN_NS (10 * 1000 * 1000ULL)
#define RECOMPOSE_MAX_SHIFT 7

// Kinds of notice, generated for Go by bpf2go (-type notice_kind).
enum notice_kind {
	NOTICE_PROCESS = 1, // a process's mappings were read (first sample, exec, new mapping)
	NOTICE_EXIT = 2,    // a process with mappings in unwind_procs exited
	NOTICE_FILE = 3,    // a walk entered a file with no table: build it
	NOTICE_READ = 4,    // read this process's mappings from /proc (kernels without task work)
};

// Flags of a notice, generated for Go by bpf2go (-type notice_flag).
enum notice_flag {
	NOTICE_NEW = 1, // PROCESS: the process had no entry before (not an exec or a new read)
};

// A notice to user space. Its length depends on its kind: the header up to
// proc.mappings, then proc.count mappings (PROCESS: the process's; FILE:
// the one entered; EXIT, READ: none).
struct notice {
	u32 kind; // enum notice_kind
	u32 pid;
	u64 ktime;
	u64 cgroup;  // PROCESS: its cgroup (v2 id), 0 unknown
	u64 exe_ino; // PROCESS: its executable (mm->exe_file), 0 unknown
	u32 exe_dev;
	u32 visited; // VMAs looked at (PROCESS), scratch for the read
	u32 flags;   // enum notice_flag
	u32 pad;
	struct unwind_proc proc; // PROCESS, READ: the entry (READ: identity only); FILE: one mapping
};

#define NOTICE_HEAD_BYTES __builtin_offsetof(struct notice, proc.mappings)

// Read as notices come (each wakes the reader): room for 48 of the largest
// is plenty, and its pages are the collector's memory once touched.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 128 << 10);
} notices SEC(".maps");

const struct notice *unused_notice __attribute__((unused));
const enum notice_kind *unused_notice_kind __attribute__((unused));
const enum notice_flag *unused_notice_flag __attribute__((unused));
const enum unwind_mapping_kind *unused_unwind_mapping_kind __attribute__((unused));
const enum unwind_file_state *unused_unwind_file_state __attribute__((unused));
const enum unwind_proc_flag *unused_unwind_proc_flag __attribute__((unused));
const struct unwind_file_key *unused_unwind_file_key __attribute__((unused));
const struct unwind_file *unused_unwind_file __attribute__((unused));

// The kernel fields read, under flavor names: only these are relocated.
struct super_block___pm {
	u32 s_dev;
} __attribute__((preserve_access_index));

struct inode___pm {
	struct super_block___pm *i_sb;
	unsigned long i_ino;
} __attribute__((preserve_access_index));

struct file___pm {
	struct inode___pm *f_inode;
	unsigned int f_mode;
} __attribute__((preserve_access_index));

struct dentry___pm {
	struct inode___pm *d_inode;
} __attribute__((preserve_access_index));

struct path___pm {
	void *mnt;
	struct dentry___pm *dentry;
} __attribute__((preserve_access_index));

// A file that a stackable file system (overlayfs) maps in its own place
// (6.6+): the path the process opened follows it.
struct backing_file___pm {
	struct file___pm file;
	struct path___pm user_path;
} __attribute__((preserve_access_index));

// FMODE_BACKING of this kernel, set by the loader from its version: 1 << 25
// from 6.8, when /proc/PID/maps began to show the inode the process opened
// (overlayfs's) rather than the backing file's, 1 << 24 from 6.14; 0
// before 6.8.
const volatile u32 fmode_backing = 0;

// user_inode returns the inode of file as /proc/PID/maps shows it: for a
// backing file, the inode of the path the process opened, whose identity
// user space sees when it opens the mapping (kernel's file_user_inode).
static __always_inline struct inode___pm *user_inode(struct file___pm *file)
{
	if (fmode_backing && bpf_core_type_exists(struct backing_file___pm) &&
	    (BPF_CORE_READ(file, f_mode) & fmode_backing)) {
		struct inode___pm *inode = BPF_CORE_READ((struct backing_file___pm *)file, user_path.dentry, d_inode);
		if (inode)
			return inode;
	}
	return BPF_CORE_READ(file, f_inode);
}

struct vm_area_struct___pm {
	unsigned long vm_start, vm_end;
	unsigned long vm_flags;
	unsigned long vm_pgoff;
	struct file___pm *vm_file;
} __attribute__((preserve_access_index));

struct mm_context___pm {
	void *vdso;
} __attribute__((preserve_access_index));

struct mm_struct___pm {
	struct mm_context___pm context;
	struct file___pm *exe_file;
} __attribute__((preserve_access_index));

struct task_struct___pm {
	u64 start_time;
} __attribute__((preserve_access_index));

#define VM_READ 0x1
#define VM_WRITE 0x2
#define VM_EXEC 0x4
#define VM_SHARED 0x8
#define PAGE_SHIFT 12

// image_start is the start of task's process, which names it across exec
// (the exec'ing thread takes its leader's start) but not across pid reuse.
static __always_inline u64 image_start(struct task_struct *task)
{
	return ((struct task_struct___pm *)task->group_leader)->start_time;
}

// same_image says whether proc was read from task's current image.
static __always_inline bool same_image(struct unwind_proc *proc, struct task_struct *task)
{
	return proc->mm == (u64)task->mm && proc->start_ns == image_start(task);
}

// claim_compose takes the right to read tgid's mappings, asked at now. A
// claim whose read never came is taken over after COMPOSE_CLAIM_NS.
static __always_inline bool claim_compose(u32 tgid, u64 now)
{
	if (bpf_map_update_elem(&composing, &tgid, &now, BPF_NOEXIST) == 0)
		return true;
	u64 *since = bpf_map_lookup_elem(&composing, &tgid);
	if (!since)
		return false;
	u64 old = *since;
	return now - old > COMPOSE_CLAIM_NS && __sync_val_compare_and_swap(since, old, now) == old;
}

static __always_inline void release_compose(u32 tgid)
{
	bpf_map_delete_elem(&composing, &tgid);
}

// recompose_due says whether a sample of proc, whose walk found an address
// outside its mappings, may have them read again now, and takes that
// right: once per backoff, which doubles with each read asked this way.
static __always_inline bool recompose_due(struct unwind_proc *proc, u64 now)
{
	u64 asked = proc->asked_ns;
	u32 shift = proc->flags >> 24;
	if (shift > RECOMPOSE_MAX_SHIFT)
		shift = RECOMPOSE_MAX_SHIFT;
	u64 since = asked > proc->composed_ns ? asked : proc->composed_ns;
	if (now - since < (RECOMPOSE_MIN_NS << shift))
		return false;
	return __sync_val_compare_and_swap(&proc->asked_ns, asked, now) == asked;
}

// file_key returns the unwind_files key of m's table.
static __always_inline struct unwind_file_key file_key(struct unwind_mapping *m)
{
	struct unwind_file_key k = { .ino = m->ino, .dev = m->dev };
	if (m->kind == UNWIND_MAPPING_VDSO) {
		k.ino = UNWIND_VDSO_INO;
		k.dev = 0;
	}
	return k;
}

// reserve_notice reserves a notice of bytes (a constant once inlined),
// its head zeroed but for kind, pid and ktime; NULL, counted, when the
// ringbuf is full.
static __always_inline struct notice *reserve_notice(u32 kind, u32 pid, u64 ktime, u64 bytes)
{
	struct notice *n = bpf_ringbuf_reserve(&notices, bytes, 0);
	if (!n) {
		count(COUNTER_NOTICES_LOST);
		return 0;
	}
	__builtin_memset(n, 0, NOTICE_HEAD_BYTES);
	n->kind = kind;
	n->pid = pid;
	n->ktime = ktime;
	return n;
}

// announce asks user space for the table of m's file, which a walk of pid
// entered and unwind_files does not hold: a pending entry first, so that
// only one notice goes per file, taken back when the notice is lost.
static __always_inline void announce(struct unwind_file_key *k, struct unwind_mapping *m, u32 pid, u64 ktime)
{
	struct unwind_file pending = { .state = UNWIND_FILE_PENDING };
	long err = bpf_map_update_elem(&unwind_files, k, &pending, BPF_NOEXIST);
	if (err) {
		if (err != -17 /* EEXIST */)
			count(COUNTER_FILES_FULL);
		return;
	}
	struct notice *n = reserve_notice(NOTICE_FILE, pid, ktime, NOTICE_HEAD_BYTES + sizeof(struct unwind_mapping));
	if (!n) {
		bpf_map_delete_elem(&unwind_files, k);
		return;
	}
	n->proc.count = 1;
	n->proc.mappings[0] = *m;
	bpf_ringbuf_submit(n, BPF_RB_FORCE_WAKEUP);
}

// add_vma fills m from v; vdso is the address of the process's vDSO.
static __always_inline void add_vma(struct unwind_mapping *m, struct vm_area_struct___pm *v, u64 vdso)
{
	u64 flags = v->vm_flags;
	m->start = v->vm_start;
	m->end = v->vm_end;
	m->prot = flags & (VM_READ | VM_WRITE | VM_EXEC | VM_SHARED);
	m->file_base = m->start - (v->vm_pgoff << PAGE_SHIFT);
	struct file___pm *file = v->vm_file;
	if (file) {
		struct inode___pm *inode = user_inode(file);
		m->kind = UNWIND_MAPPING_FILE;
		m->ino = BPF_CORE_READ(inode, i_ino);
		m->dev = BPF_CORE_READ(inode, i_sb, s_dev);
		return;
	}
	m->kind = UNWIND_MAPPING_ANON;
	m->ino = 0;
	m->dev = 0;
	if (m->start == vdso) {
		// Its table's offsets are from the image's first byte, which
		// the mapping starts with whatever its vm_pgoff.
		m->kind = UNWIND_MAPPING_VDSO;
		m->file_base = m->start;
	}
}

// VMAs a read looks at, at most: a process with more (a JVM maps
// thousands) keeps the executable ones among these.
#define COMPOSE_MAX_VMAS 8192

struct bpf_iter_task_vma {
	u64 __opaque[1];
} __attribute__((aligned(8)));

extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it, struct task_struct *task, u64 addr) __ksym;
extern struct vm_area_struct___pm *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __ksym;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __ksym;

// compose reads task's executable mappings into n, a PROCESS notice whose
// proc is the process's new entry, at now; since is the time of the
// sample that asked, the notice's: the earliest known sample of the image.
// The loop's counts live in n, not in registers: the verifier then checks
// one iteration for any of them, instead of one per count. It returns 0,
// or the iterator's error (-EBUSY: the mmap lock was taken).
static __always_inline int compose(struct task_struct *task, struct notice *n, u64 now, u64 since)
{
	struct mm_struct___pm *mm = (void *)task->mm;
	u64 vdso = (u64)BPF_CORE_READ(mm, context.vdso);
	n->kind = NOTICE_PROCESS;
	n->pid = task->tgid;
	n->ktime = since;
	n->cgroup = bpf_get_current_cgroup_id();
	struct file___pm *exe = BPF_CORE_READ(mm, exe_file);
	if (exe) {
		struct inode___pm *inode = user_inode(exe);
		n->exe_ino = BPF_CORE_READ(inode, i_ino);
		n->exe_dev = BPF_CORE_READ(inode, i_sb, s_dev);
	} else {
		n->exe_ino = 0;
		n->exe_dev = 0;
	}
	n->visited = 0;
	n->flags = 0;
	n->proc.mm = (u64)mm;
	n->proc.start_ns = image_start(task);
	n->proc.composed_ns = now;
	n->proc.asked_ns = 0;
	n->proc.count = 0;
	n->proc.flags = 0;

	struct bpf_iter_task_vma it;
	int err = bpf_iter_task_vma_new(&it, task, 0);
	if (!err) {
		struct vm_area_struct___pm *v;
		while ((v = bpf_iter_task_vma_next(&it))) {
			if (++n->visited > COMPOSE_MAX_VMAS) {
				n->proc.flags |= UNWIND_PROC_OVERFLOW;
				break;
			}
			if (!(v->vm_flags & VM_EXEC))
				continue;
			u32 i = n->proc.count;
			if (i >= UNWIND_MAX_MAPPINGS) {
				n->proc.flags |= UNWIND_PROC_OVERFLOW;
				break;
			}
			add_vma(&n->proc.mappings[i & (UNWIND_MAX_MAPPINGS - 1)], v, vdso);
			n->proc.count = i + 1;
		}
	}
	bpf_iter_task_vma_destroy(&it);
	if (err)
		count(COUNTER_COMPOSE_BUSY);
	if (n->proc.flags & UNWIND_PROC_OVERFLOW)
		count(COUNTER_COMPOSE_OVERFLOW);
	return err;
}

// notice_bytes is the length of a notice with n's mappings.
static __always_inline u64 notice_bytes(struct notice *n)
{
	u64 c = n->proc.count;
	if (c > UNWIND_MAX_MAPPINGS)
		c = UNWIND_MAX_MAPPINGS;
	return NOTICE_HEAD_BYTES + c * sizeof(struct unwind_mapping);
}

// notify sends n, waking the reader: a notice is read at once (the
// process may be gone soon), not when the ringbuf's data reaches a mark.
// An exit, sent without a wakeup before it, would keep a plain submit from
// waking anyone.
static __always_inline void notify(struct notice *n)
{
	u64 size = notice_bytes(n);
	if (size < NOTICE_HEAD_BYTES || size > sizeof(*n))
		return;
	if (bpf_ringbuf_output(&notices, n, size, BPF_RB_FORCE_WAKEUP))
		count(COUNTER_NOTICES_LOST);
}

// notice_exit tells user space that tgid, which had mappings here, exited.
static __always_inline void notice_exit(u32 tgid)
{
	struct notice *n = reserve_notice(NOTICE_EXIT, tgid, bpf_ktime_get_ns(), NOTICE_HEAD_BYTES);
	if (!n)
		return;
	// Exits are not urgent: read with the next notice that wakes.
	bpf_ringbuf_submit(n, BPF_RB_NO_WAKEUP);
}

#endif /* BPFCOL_PROCMAPS_H */
