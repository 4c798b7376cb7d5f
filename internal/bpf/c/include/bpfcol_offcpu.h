/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Off-CPU profiling of profiler.bpf.c: sampled waits, weighed by their
 * length, walked in a BPF task work or at the switch-out.
 *
 * Included once, by profiler.bpf.c, after the sample record, its walk
 * and its output.
 */

#ifndef BPFCOL_OFFCPU_H
#define BPFCOL_OFFCPU_H

// Off-CPU profiling, on tp_btf/sched_switch. sched_switch runs in prev's
// context, so prev's off-CPU time starts there, and next's ends there: no
// kprobe is needed. A sampled share of switch-outs is followed; when the
// thread is switched back in after at least off_cpu_min_ns, one record
// weighted by the time in between goes out.
//
// The user stack is the costly part: a CFI walk reads the thread's memory
// frame by frame. Walking it in sched_switch, on every sampled switch-out,
// costs every context switch of the host even when the wait turns out too
// short to keep. So, where the kernel has task work kfuncs (6.18), a sampled
// switch-out only notes the time; at a switch-in that keeps the wait, the
// kernel stack is taken (next is still switched out, its saved stack is the
// one it waited in) and a task work is scheduled on next: it runs in the
// thread's own context on its next return to user space, where the user
// registers are still those it blocked with, since no user code ran in
// between. The walk and the record happen there, for kept waits only.
// Kernels without it walk at the switch-out (off_cpu_switch_walk).

// Set by the loader.
const volatile u64 off_cpu_min_ns = 0;

// Set by the loader: the one process whose switch-outs are followed, 0
// for all.
const volatile u32 off_cpu_tgid = 0;

// Set by the loader: at most this many threads hold a record slot.
const volatile u64 off_cpu_max_threads = 4096;

// Slots allocated now, against off_cpu_max_threads.
u64 off_cpu_slot_count = 0;

// Time spent in off_cpu_walk and its runs: a task work callback is no
// program of its own, so the kernel's run-time statistics miss it.
u64 off_cpu_walk_ns = 0;
u64 off_cpu_walks = 0;

// Every context switch of the host runs off_cpu_switch, so its common
// path, a switch-out not sampled and a switch-in of a thread whose
// switch-out was not, calls no helper and reads no clock: a clock read
// costs about 40 ns in a VM, bpf_get_prandom_u32 and a task storage lookup
// about 20 ns each, measured with `perf bench sched pipe`, where the path
// below costs a few.
//
// Rather than draw a random number at every switch-out, each CPU counts
// down the switch-outs to its next sampled one, a number drawn with the
// geometric distribution of the gaps between successes of independent
// trials of the configured probability: the same sampled switch-outs, in
// distribution, for one draw per sample.

// Set by the loader: 1 / -log2(1 - probability), its integer part and
// its fraction times 2^32; 0 when every switch-out is sampled. A gap is
// -log2(u) times that, rounded down, u uniform in (0, 1].
const volatile u64 off_cpu_gap_int = 0;
const volatile u64 off_cpu_gap_frac = 0;

// Set by the loader: log2(1 + (i + 1/2) / 256) times 2^16, the fraction
// of a log2 from a 32-bit number's 8 bits after its highest.
const volatile u32 off_cpu_log2_frac[256] = {};

// Per-CPU countdowns and xorshift states, a cache line each, both set by
// the loader: a countdown starts as a gap drawn like the others, so that a
// CPU's first switch-outs are sampled like any. CPUs beyond
// OFF_CPU_RNG_CPUS share one, which costs the sampling nothing that
// matters here.
#define OFF_CPU_RNG_CPUS 256
struct off_cpu_rng {
	u64 left;  // switch-outs to let pass before the next sampled one
	u64 state; // never 0
	u64 cur;   // the task this CPU last switched to (check_reported)
	u64 pad[5];
};
struct off_cpu_rng off_cpu_rngs[OFF_CPU_RNG_CPUS];

// next_gap draws, from r's random state, how many switch-outs to let pass
// before the next sampled one. Inlined: as a function of its own it made
// every switch dearer, sampled or not (BPF run time per switch beyond an
// empty program, both loaded side by side on `perf bench sched pipe` on
// one CPU: about a fifth more at probability 0.05 and at 1e-12).
static __always_inline u64 next_gap(struct off_cpu_rng *r)
{
	if (!r)
		return 0;
	u64 x = r->state;
	if (!x) // not set by the loader
		x = (u64)bpf_get_prandom_u32() << 32 | bpf_get_prandom_u32() | 1;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	r->state = x;
	u32 u = x >> 32;
	if (!u)
		u = 1;
	// -log2(u / 2^32) = 32 - log2(u), in 16.16 fixed point: the position
	// of u's highest bit, and the fraction from the 8 bits after it.
	u32 e = 0, v = u;
	if (v >> 16) {
		v >>= 16;
		e += 16;
	}
	if (v >> 8) {
		v >>= 8;
		e += 8;
	}
	if (v >> 4) {
		v >>= 4;
		e += 4;
	}
	if (v >> 2) {
		v >>= 2;
		e += 2;
	}
	if (v >> 1)
		e += 1;
	u32 frac = off_cpu_log2_frac[((u64)u << (31 - e) >> 23) & 255];
	u64 neglog = ((u64)(32 - e) << 16) - frac;
	return (neglog * off_cpu_gap_int + (neglog * off_cpu_gap_frac >> 32)) >> 16;
}

// this_rng is this CPU's countdown and state.
static __always_inline struct off_cpu_rng *this_rng(void)
{
	return &off_cpu_rngs[bpf_get_smp_processor_id() & (OFF_CPU_RNG_CPUS - 1)];
}

// sampled says whether this switch-out is followed.
static __always_inline bool sampled(struct off_cpu_rng *r)
{
	u64 left = r->left;
	if (left) {
		r->left = left - 1;
		return false;
	}
	r->left = next_gap(r);
	return true;
}

// The scheduler's clock on this CPU, as of the switch (__schedule updates
// it before it picks the next task): reading it costs a few loads where a
// clock read costs tens of nanoseconds. It runs at the rate of
// bpf_ktime_get_ns (which NTP slews by at most 0.05%), from another origin:
// fit for durations, not for timestamps. Without CONFIG_FAIR_GROUP_SCHED,
// where a CFS run queue does not point back to its CPU's, the clock is
// read.
struct sched_entity {
	struct cfs_rq *cfs_rq;
} __attribute__((preserve_access_index));

struct cfs_rq {
	struct rq *rq;
} __attribute__((preserve_access_index));

struct rq {
	u64 clock;
} __attribute__((preserve_access_index));

struct task_struct___sched {
	struct sched_entity se;
} __attribute__((preserve_access_index));

struct sched_info {
	unsigned long long last_arrival;
} __attribute__((preserve_access_index));

struct task_struct___sched_info {
	struct sched_info sched_info;
} __attribute__((preserve_access_index));

// arrival_ns is when task last came on a CPU, on the clock of switch_ns
// (CONFIG_SCHED_INFO); 0 if unknown.
static __always_inline u64 arrival_ns(struct task_struct *task)
{
	if (!bpf_core_field_exists(((struct task_struct___sched_info *)0)->sched_info) ||
	    !bpf_core_field_exists(((struct cfs_rq *)0)->rq))
		return 0;
	return ((struct task_struct___sched_info *)task)->sched_info.last_arrival;
}

// switch_ns is the time of a switch on this CPU of task, prev or next; 0
// if its run queue could not be read.
static __always_inline u64 switch_ns(struct task_struct *task)
{
	if (!bpf_core_field_exists(((struct cfs_rq *)0)->rq))
		return bpf_ktime_get_ns();
	return ((struct task_struct___sched *)task)->se.cfs_rq->rq->clock;
}

// Open followed waits by a hash of the thread id (open_bucket): a switch-in
// of a thread whose bucket is zero has no followed wait to end, and needs
// no task storage lookup. A bucket counts the threads sharing it, so a
// collision costs only the lookup. Incremented when a thread's slot gets
// its switch-out time, decremented when the time is taken (or the thread
// exits with it).
#define OFF_CPU_OPEN_BITS 12
u32 off_cpu_open[1 << OFF_CPU_OPEN_BITS];

// open_bucket is tid's counter in off_cpu_open. Consecutive thread ids
// (the threads of one process, or a parent and its child) land on different
// cache lines: a sampled switch of one then does not take from other CPUs
// the line that every switch-in of the other reads.
static __always_inline u32 *open_bucket(u32 tid)
{
	return &off_cpu_open[(tid * 0x9e3779b1U) >> (32 - OFF_CPU_OPEN_BITS)];
}

static __always_inline bool maybe_open(u32 tid)
{
	return *open_bucket(tid) != 0;
}

static __always_inline void open_wait(u32 tid)
{
	__sync_fetch_and_add(open_bucket(tid), 1);
}

static __always_inline void close_wait(u32 tid)
{
	// Adding -1: 32-bit atomic subtraction needs a newer BPF ISA.
	__sync_fetch_and_add(open_bucket(tid), (u32)-1);
}

// A thread's slot, in its task storage: found at every switch-in without a
// hash. A slot stays with its thread, so sampling allocates nothing after
// the first time; it goes when the thread exits (off_cpu_exit), or, once
// more than half of off_cpu_max_threads are taken, at the thread's
// switch-in: a host with more threads than the bound still has every
// thread sampled.
struct off_cpu_slot {
	u64 out_ns; // a sampled switch-out's time (switch_ns); 0: none
	u32 flags;  // its SAMPLE_PREEMPTED
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct off_cpu_slot);
} off_cpu_slots SEC(".maps");

// A kept wait, by thread id, from its switch-in to the end of its task
// work: what the walk adds the user stack to. The kernel takes task work
// handles in hash, LRU hash and array values, not in task storage. A
// thread has one at a time. A syscall may wait several times before it
// returns to user space (a large pipe write, a read of many pages): the
// waits after the first have the same user stack, so their time is added
// to the first's, whose kernel stack stands for them all.
struct off_cpu_work {
	struct bpf_task_work tw;
	u64 start_ns;
	u64 off_ns;
	u64 mm; // the address space (mm_struct) the user stack is in
	u32 flags;
	u32 taken; // the walk has started: off_ns is read
	s32 kernel_bytes;
	u32 pad;
	u64 kernel[MAX_STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096); // off_cpu_max_threads, set by the loader
	__type(key, u32);
	__type(value, struct off_cpu_work);
} off_cpu_works SEC(".maps");

// What a work entry is created from, zeroes: too large for the BPF stack,
// and kept out of .bss, which user space maps and so may not hold a task
// work handle.
struct off_cpu_work_bytes {
	u8 b[sizeof(struct off_cpu_work)];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct off_cpu_work_bytes);
} off_cpu_empty_work SEC(".maps");

// slot_get returns task's slot, allocating one under off_cpu_max_threads.
static __always_inline void *slot_get(void *map, struct task_struct *task)
{
	void *slot = bpf_task_storage_get(map, task, 0, 0);
	if (slot)
		return slot;
	// Take a place under the bound first, with a compare-and-swap so that
	// the count never passes the bound, even for a moment (an add undone
	// after the check could be read as one slot too many). A CPU that
	// loses the race for a place is turned away as if the bound were
	// reached.
	u64 held = off_cpu_slot_count;
	if (held >= off_cpu_max_threads ||
	    __sync_val_compare_and_swap(&off_cpu_slot_count, held, held + 1) != held) {
		count(COUNTER_OFF_CPU_FULL);
		return 0;
	}
	slot = bpf_task_storage_get(map, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!slot) {
		__sync_fetch_and_sub(&off_cpu_slot_count, 1);
		count(COUNTER_OFF_CPU_FULL);
	}
	return slot;
}

// slot_release hands task's slot back once more than half of the bound is
// taken.
static __always_inline void slot_release(void *map, struct task_struct *task)
{
	if (off_cpu_slot_count > off_cpu_max_threads / 2 && bpf_task_storage_delete(map, task) == 0)
		__sync_fetch_and_sub(&off_cpu_slot_count, 1);
}

// followed says whether a switch-out of task can be followed. Kernel
// threads and user workers (io_uring, vhost) never return to user space:
// they belong to no process's profile of waits, and a task work would never
// run on them. An exiting thread has passed off_cpu_exit: a slot made now
// would never be counted back.
static __always_inline bool followed(struct task_struct *task)
{
	return task->pid != 0 && !(task->flags & (PF_KTHREAD | PF_EXITING | PF_IO_WORKER | PF_USER_WORKER)) &&
	       (!off_cpu_tgid || task->tgid == off_cpu_tgid);
}

// off_cpu_walk is the task work of a kept wait: it runs in the thread's
// context on its return to user space, walks the user stack it blocked
// with, and sends the record with the wait's kernel stack.
// reread_mappings reads again the mappings of process tgid, whose off-CPU
// walk met a caller outside them: a V8 process's waits may be all the
// samples it has, and a caller in JIT code mapped since is read as a
// sample's leaf would be (rate-limited alike).
static __always_inline void reread_mappings(struct task_struct *task, u32 tgid, u64 t0)
{
	struct unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (proc && recompose_due(proc, t0) && claim_compose(tgid, t0)) {
		read_mappings(task, tgid, t0, t0, true);
		release_compose(tgid);
	}
}

static int off_cpu_walk(struct bpf_map *map, void *key, void *value)
{
	u64 t0 = bpf_ktime_get_ns();
	struct off_cpu_work *w = value;
	// Set before anything is read: a switch-in adds no more time from
	// here (the callback can be preempted).
	w->taken = 1;
	struct task_struct *task = bpf_get_current_task_btf();
	// Run from the exit path, or after an exec: the user stack is not the
	// one the thread waited with any more.
	if ((task->flags & PF_EXITING) || (u64)task->mm != w->mm) {
		count(COUNTER_OFF_CPU_GONE);
		goto done;
	}
	// A process blocked more than it runs may have no on-CPU sample to
	// have its mappings read.
	want_mappings(task, t0, true);
	// An interpreter's process has its frames walked too: its record is
	// reserved whole (off-CPU events are rarer than samples).
	u64 pid_tgid = bpf_get_current_pid_tgid();
	struct py_proc *py;
	struct hs_proc *hs;
	struct v8_proc *v8;
	interp_proc_of(pid_tgid >> 32, &py, &hs, &v8);
	// Few values live across the walk: each costs stack under the
	// HotSpot frame step's (see struct walk).
	bool interp = py || hs || v8;
	struct sample *s;
	if (interp)
		s = bpf_ringbuf_reserve(&samples, sizeof(struct sample_interp), 0);
	else
		s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		count(COUNTER_DROPPED_RINGBUF);
		goto done;
	}
	if (interp)
		interp_begin((struct sample_interp *)s);
	bool unmapped = fill_sample(0, s, pid_tgid, false, hs, v8);
	if (v8 && unmapped && compose_in_task_work)
		reread_mappings(bpf_get_current_task_btf(), bpf_get_current_pid_tgid() >> 32, bpf_ktime_get_ns());
	s->ktime_ns = w->start_ns;
	s->flags |= SAMPLE_OFF_CPU | (w->flags & SAMPLE_PREEMPTED);
	s->off_cpu_ns = w->off_ns;
	s->kernel_bytes = w->kernel_bytes;
	if (s->kernel_bytes > 0 && bpf_probe_read_kernel(s->kernel, sizeof(s->kernel), w->kernel))
		s->kernel_bytes = -14; // EFAULT
	if (interp)
		walk_interp((struct sample_interp *)s, py);
	count(COUNTER_OFF_CPU_EVENTS);
	submit(s);
done:
	// The wait is dealt with: its entry goes (the kernel keeps the running
	// work's own state until the callback returns).
	bpf_map_delete_elem(&off_cpu_works, key);
	__sync_fetch_and_add(&off_cpu_walk_ns, bpf_ktime_get_ns() - t0);
	__sync_fetch_and_add(&off_cpu_walks, 1);
	return 0;
}

// preempted says whether sched_switch's prev could have run on: it was
// preempted, or still TASK_RUNNING (0) at the switch-out. Read only for a
// sampled switch-out: the unsampled ones, nearly all, skip its loads.
static __always_inline bool preempted(u64 *ctx)
{
	return (bool)ctx[0] || (unsigned int)ctx[3] == 0;
}

// unended_wait says whether a wait that ended at in (arrival_ns), out
// (switch_ns) after it began, needed keeping: not known short.
static __always_inline bool unended_kept(u64 out, u64 in)
{
	u64 off = in - out;
	if (in && (s64)off >= 0 && off < off_cpu_min_ns) {
		count(COUNTER_OFF_CPU_SHORT);
		return false;
	}
	return true;
}

// take_wait takes task's open followed wait, if any: it returns its slot
// and sets *out to its switch-out time.
static __always_inline struct off_cpu_slot *take_wait(struct task_struct *task, u64 *out)
{
	u32 tid = task->pid;
	if (tid == 0 || !maybe_open(tid))
		return 0;
	struct off_cpu_slot *slot = bpf_task_storage_get(&off_cpu_slots, task, 0, 0);
	if (!slot || !slot->out_ns)
		return 0;
	*out = slot->out_ns;
	slot->out_ns = 0;
	close_wait(tid);
	return slot;
}

// The threads that lost kept waits (off_cpu_unended), with how many: a
// bounded record of which, for tests and troubleshooting.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256);
	__type(key, u32); // tid
	__type(value, u64);
} off_cpu_unended_tids SEC(".maps");

// count_tid adds one to tid's count in a per-thread LRU map.
static __always_inline void count_tid(void *map, u32 tid)
{
	u64 *n = bpf_map_lookup_elem(map, &tid);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return;
	}
	u64 one = 1;
	bpf_map_update_elem(map, &tid, &one, BPF_NOEXIST);
}

static __always_inline void count_unended(u32 tid)
{
	count(COUNTER_OFF_CPU_UNENDED);
	count_tid(&off_cpu_unended_tids, tid);
}

// off_cpu_unended ends prev's wait if its switch-in was never seen: prev
// is switching out, so it came back on a CPU at its last arrival, but its
// wait's stacks went with that switch-in. A kept one is lost, counted.
static __always_inline void off_cpu_unended(struct task_struct *prev)
{
	u64 out;
	if (take_wait(prev, &out) && unended_kept(out, arrival_ns(prev)))
		count_unended(prev->pid);
}

// off_cpu_begin notes a sampled switch-out of prev: its time only.
static __always_inline void off_cpu_begin(u64 *ctx, struct task_struct *prev, struct off_cpu_rng *r)
{
	off_cpu_unended(prev);
	if (!sampled(r) || !followed(prev))
		return;
	u64 now = switch_ns(prev);
	if (!now)
		return;
	struct off_cpu_slot *slot = slot_get(&off_cpu_slots, prev);
	if (!slot)
		return;
	open_wait(prev->pid);
	slot->out_ns = now;
	slot->flags = preempted(ctx) ? SAMPLE_PREEMPTED : 0;
}

// keep_wait takes a kept wait's kernel stack and schedules the task work
// that adds its user stack.
static __always_inline void keep_wait(struct task_struct *next, u64 off, u32 flags)
{
	u32 zero = 0;
	struct off_cpu_work_bytes *empty = bpf_map_lookup_elem(&off_cpu_empty_work, &zero);
	if (!empty)
		return;
	u32 tid = next->pid;
	long err = bpf_map_update_elem(&off_cpu_works, &tid, empty, BPF_NOEXIST);
	struct off_cpu_work *w = bpf_map_lookup_elem(&off_cpu_works, &tid);
	if (err == -17 /* EEXIST */ && w) {
		// The thread went off CPU again before returning to user
		// space, where the previous wait's walk runs.
		if (w->taken) {
			count(COUNTER_OFF_CPU_BUSY);
		} else {
			__sync_fetch_and_add(&w->off_ns, off);
			count(COUNTER_OFF_CPU_MERGED);
		}
		return;
	}
	if (err || !w) {
		count(COUNTER_OFF_CPU_FULL);
		return;
	}
	// The start on the clock of on-CPU samples (switch_ns may count
	// from another origin): rare enough here to read it.
	w->start_ns = bpf_ktime_get_ns() - off;
	w->off_ns = off;
	w->flags = flags;
	w->mm = (u64)next->mm;
	// next is still switched out: its saved kernel stack is the one it
	// waited in, from the scheduler down.
	w->kernel_bytes = bpf_get_task_stack(next, w->kernel, sizeof(w->kernel), 0);
	if (w->kernel_bytes < 0)
		count(COUNTER_KERNEL_STACK_ERR);
	if (bpf_task_work_schedule_resume_impl(next, &w->tw, &off_cpu_works, off_cpu_walk, 0)) {
		count(COUNTER_OFF_CPU_SCHED_ERR);
		bpf_map_delete_elem(&off_cpu_works, &tid);
	}
}

// off_cpu_end ends next's followed wait, if any.
static __always_inline void off_cpu_end(struct task_struct *next)
{
	u64 start;
	struct off_cpu_slot *slot = take_wait(next, &start);
	if (!slot)
		return;
	u64 now = switch_ns(next);
	u64 off = now - start;
	// Unknown, or the clocks of two CPUs a little apart: as short.
	if (!now || (s64)off < 0)
		off = 0;
	if (off < off_cpu_min_ns)
		count(COUNTER_OFF_CPU_SHORT);
	else
		keep_wait(next, off, slot->flags);
	slot_release(&off_cpu_slots, next);
}

// off_cpu_exit frees an exiting thread's slot, which the kernel would free
// with the task anyway, to keep off_cpu_slot_count exact; a kept wait still
// waiting for its walk is lost, and its work cancelled with its entry.
SEC("tp_btf/sched_process_exit")
int off_cpu_exit(u64 *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx[0];
	u32 tid = task->pid;
	if (bpf_map_delete_elem(&off_cpu_works, &tid) == 0)
		count(COUNTER_OFF_CPU_GONE);
	struct off_cpu_slot *slot = bpf_task_storage_get(&off_cpu_slots, task, 0, 0);
	if (!slot)
		return 0;
	if (slot->out_ns)
		close_wait(tid);
	if (bpf_task_storage_delete(&off_cpu_slots, task) == 0)
		__sync_fetch_and_sub(&off_cpu_slot_count, 1);
	return 0;
}

// Switches sched_switch does not report. The kernel may leave some out:
// on the VM measured here, every switch-out of the VM agent's threads
// (pid 1, hidden from perf's sampling and tracepoints alike; only its
// context-switch counter counts them), and with it the switch-in of
// whichever thread ran next. A CPU's reported switches then do not chain:
// the next one switches out another task than the one it last switched
// to. They are counted; a wait whose switch-in went so is found at its
// thread's next switch-out (off_cpu_unended).
// The threads whose switch-in went unreported (prev of such a switch),
// with how many: what explains a wait of theirs lost (off_cpu_unended_tids).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256);
	__type(key, u32); // tid
	__type(value, u64);
} off_cpu_unreported_tids SEC(".maps");

static __always_inline void check_reported(struct off_cpu_rng *r, struct task_struct *prev, struct task_struct *next)
{
	u64 cur = r->cur;
	r->cur = next->pid;
	if (cur == (u64)prev->pid || cur == 0 || bpf_get_smp_processor_id() >= OFF_CPU_RNG_CPUS)
		return;
	count(COUNTER_OFF_CPU_UNREPORTED);
	count_tid(&off_cpu_unreported_tids, prev->pid);
}

// sched_switch(bool preempt, struct task_struct *prev, struct task_struct
// *next, unsigned int prev_state): prev_state is an argument since 5.18.
SEC("tp_btf/sched_switch")
int off_cpu_switch(u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	struct off_cpu_rng *r = this_rng();

	check_reported(r, prev, next);
	off_cpu_end(next);
	off_cpu_begin(ctx, prev, r);
	return 0;
}

// Without task work kfuncs (before 6.18), the user stack is walked at the
// sampled switch-out itself, in sched_switch, and the whole record is held
// in the thread's slot until its switch-in.
struct off_cpu_held {
	u32 held; // rec is a switch-out waiting for the thread's switch-in
	u32 pad;
	struct sample rec;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct off_cpu_held);
} off_cpu_held_slots SEC(".maps");

// submit_held sends slot's held record, off long, with task's kernel
// stack when task is still switched out (its switch-in), else none.
static __always_inline void submit_held(struct off_cpu_held *slot, u64 off, struct task_struct *task)
{
	struct sample *rec = &slot->rec;
	rec->off_cpu_ns = off;
	rec->kernel_bytes = task ? bpf_get_task_stack(task, rec->kernel, sizeof(rec->kernel), 0) : -2 /* ENOENT */;
	if (rec->kernel_bytes < 0)
		count(COUNTER_KERNEL_STACK_ERR);
	struct sample *s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		count(COUNTER_DROPPED_RINGBUF);
		return;
	}
	if (bpf_probe_read_kernel(s, sizeof(*s), rec)) {
		bpf_ringbuf_discard(s, 0);
		return;
	}
	count(COUNTER_OFF_CPU_EVENTS);
	submit(s);
}

// take_held takes task's held record of an open followed wait, if any.
static __always_inline struct off_cpu_held *take_held(struct task_struct *task)
{
	u32 tid = task->pid;
	if (tid == 0 || !maybe_open(tid))
		return 0;
	struct off_cpu_held *slot = bpf_task_storage_get(&off_cpu_held_slots, task, 0, 0);
	if (!slot || !slot->held)
		return 0;
	slot->held = 0;
	close_wait(tid);
	return slot;
}

static __always_inline void off_cpu_end_walk(struct task_struct *next)
{
	struct off_cpu_held *slot = take_held(next);
	if (!slot)
		return;
	u64 off = bpf_ktime_get_ns() - slot->rec.ktime_ns;
	if (off < off_cpu_min_ns)
		count(COUNTER_OFF_CPU_SHORT);
	else
		submit_held(slot, off, next);
	slot_release(&off_cpu_held_slots, next);
}

// off_cpu_unended_walk is off_cpu_unended for waits walked at their
// switch-out: the held record, user stack and all, goes out without its
// kernel stack, the wait's length from prev's last arrival.
static __always_inline void off_cpu_unended_walk(struct task_struct *prev)
{
	struct off_cpu_held *slot = take_held(prev);
	if (!slot)
		return;
	u64 now = switch_ns(prev), in = arrival_ns(prev);
	if (!in || !now || (s64)(now - in) < 0) {
		count_unended(prev->pid);
		return;
	}
	// The arrival, on the clock of the record's switch-out time.
	u64 off = bpf_ktime_get_ns() - (now - in) - slot->rec.ktime_ns;
	if ((s64)off < 0 || off < off_cpu_min_ns)
		count(COUNTER_OFF_CPU_SHORT);
	else
		submit_held(slot, off, 0);
}

static __always_inline void off_cpu_begin_walk(u64 *ctx, struct task_struct *prev, struct off_cpu_rng *r)
{
	off_cpu_unended_walk(prev);
	if (!sampled(r) || !followed(prev))
		return;
	struct off_cpu_held *slot = slot_get(&off_cpu_held_slots, prev);
	if (!slot)
		return;
	open_wait(prev->pid);
	// The user stack can only be read now, in the thread's own address
	// space; its kernel stack waits where it is until the thread runs
	// again, so it is taken then, and only for waits that are kept.
	struct sample *s = &slot->rec;
	want_mappings((struct task_struct *)prev, bpf_ktime_get_ns(), false);
	fill_sample(ctx, s, bpf_get_current_pid_tgid(), false, 0, 0);
	s->flags |= SAMPLE_OFF_CPU | (preempted(ctx) ? SAMPLE_PREEMPTED : 0);
	s->off_cpu_ns = 0;
	slot->held = 1;
}

SEC("tp_btf/sched_process_exit")
int off_cpu_exit_walk(u64 *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx[0];
	struct off_cpu_held *slot = bpf_task_storage_get(&off_cpu_held_slots, task, 0, 0);
	if (!slot)
		return 0;
	if (slot->held)
		close_wait(task->pid);
	if (bpf_task_storage_delete(&off_cpu_held_slots, task) == 0)
		__sync_fetch_and_sub(&off_cpu_slot_count, 1);
	return 0;
}

SEC("tp_btf/sched_switch")
int off_cpu_switch_walk(u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];

	struct off_cpu_rng *r = this_rng();

	check_reported(r, prev, next);
	off_cpu_end_walk(next);
	off_cpu_begin_walk(ctx, prev, r);
	return 0;
}

#endif /* BPFCOL_OFFCPU_H */
