// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// On-CPU stack sampler: one perf_event program per CPU on the software
// cpu-clock. Each sample carries both stacks, copied with bpf_get_stack into
// the record itself, so no stack-id hash table can collide and drop one.
// Records go to a ringbuf that user space drains; every sample that cannot
// be recorded is counted.
//
// User stacks are walked with the CFI tables user space loads into
// unwind_files/unwind_rows (bpfcol_unwind.h, walked by bpfcol_walk.h),
// through the process's mappings that BPF reads itself (bpfcol_procmaps.h);
// a process not read yet is walked by bpf_get_stack's frame pointers, as are
// mappings without CFI. Off-CPU records are bpfcol_offcpu.h's.

#include "bpfcol_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "bpfcol_unwind.h"
#include "bpfcol_scopes.h"
#include "bpfcol_uretprobe.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define MAX_STACK_DEPTH 127

struct sample {
	u64 ktime_ns;
	u32 pid; // tgid
	u32 tid;
	u32 cpu;
	u32 flags;
	s32 kernel_bytes; // bytes of kernel[] filled, or a negative errno
	s32 user_bytes;   // bytes of user[] filled, or a negative errno
	// User registers at the sample, and where the return address of a
	// function that has not saved a frame is, which frame-pointer walking
	// cannot see: the two words at the user SP on x86-64; the link
	// register (x30) on arm64, then the second word is 0.
	u64 user_ip;
	u64 user_sp;
	u64 user_bp;
	u64 leaf_words[2];
	u64 off_cpu_ns; // SAMPLE_OFF_CPU: time from switch-out to switch-in
	struct scope_link link; // SAMPLE_SCOPE: the probe scope open at the sample
	char comm[16];
	u64 kernel[MAX_STACK_DEPTH];
	u64 user[MAX_STACK_DEPTH];
};

// Flags of a sample, generated for Go by bpf2go (-type sample_flag).
enum sample_flag {
	SAMPLE_KERNEL_THREAD = 1U << 0,
	SAMPLE_LEAF_WORDS_VALID = 1U << 1,
	SAMPLE_CFI = 1U << 2,             // user[] was walked with CFI tables
	SAMPLE_COMPLETE = 1U << 3,        // the walk reached the process root
	SAMPLE_UNKNOWN_MAPPING = 1U << 4, // an address outside the loaded mappings
	SAMPLE_NO_TABLE = 1U << 5,        // the process's tables are not loaded
	SAMPLE_LEAF_FP = 1U << 6,         // the CFI walk left the leaf by its frame pointer
	SAMPLE_OFF_CPU = 1U << 7,         // an off-CPU event: stacks at switch-out, weighted by off_cpu_ns
	SAMPLE_PREEMPTED = 1U << 12,      // off-CPU while still runnable (preempted or yielded), not blocked
	SAMPLE_SCOPE = 1U << 13,          // link holds the probe scope open on the thread or goroutine
	// The record is packed: the fields before kernel[], then the
	// kernel_bytes of kernel[] and the user_bytes of user[], then the
	// interpreter tail (struct sample_interp's from interp_frames on),
	// its interp_frames frames only.
	SAMPLE_PACKED = 1U << 14,
};
// Where a sample's flags and frames hold more than bits, generated for Go
// by bpf2go (-type sample_layout).
enum sample_layout {
	SAMPLE_STOP_SHIFT = 8,     // flags bits 8-11: enum unwind_stop of a CFI walk
	SAMPLE_STOP_MASK = 0xf,
	FRAME_PC_EXACT_SHIFT = 63, // a user frame's top bit: FRAME_PC_EXACT
};

#include "bpfcol_interp.h"

// Counter indexes, generated for Go by bpf2go (-type counter).
enum counter {
	COUNTER_SAMPLES = 0,       // samples recorded
	COUNTER_DROPPED_RINGBUF,   // ringbuf full: sample lost
	COUNTER_USER_STACK_ERR,    // user stack could not be read
	COUNTER_KERNEL_STACK_ERR,  // kernel stack could not be read
	COUNTER_SP_READ_ERR,       // the words at the user SP could not be read
	COUNTER_IDLE,              // sample on the idle task: not recorded
	COUNTER_OFF_CPU_EVENTS,    // off-CPU events recorded
	COUNTER_OFF_CPU_SHORT,     // sampled switch-outs back on CPU within min_duration: dropped
	COUNTER_OFF_CPU_FULL,      // sampled switch-outs not held: off_cpu_max_threads reached
	COUNTER_OFF_CPU_MERGED,    // kept waits added to the thread's previous one, whose walk has not started
	COUNTER_OFF_CPU_BUSY,      // kept waits dropped: the thread's previous one is being walked
	COUNTER_OFF_CPU_SCHED_ERR, // kept waits dropped: the task work walking the stack was refused
	COUNTER_OFF_CPU_GONE,      // kept waits dropped: the thread exited or exec'd before its walk
	COUNTER_OFF_CPU_UNENDED,   // kept waits lost: the thread's switch-in never reached sched_switch
	COUNTER_OFF_CPU_UNREPORTED, // switches sched_switch did not report, seen at the CPU's next one
	COUNTER_INTERP_SAMPLES,    // samples of processes that run an interpreter, with its frames walked
	COUNTER_NOTICES_LOST,      // notices to user space lost: their ringbuf was full
	COUNTER_FILES_FULL,        // files entered with no table not asked for: unwind_files was full
	COUNTER_PROCS_FULL,        // processes whose mappings were read but not kept: unwind_procs was full
	COUNTER_COMPOSE_BUSY,      // reads of a process's mappings refused: its mmap lock was taken
	COUNTER_COMPOSE_OVERFLOW,  // reads that kept only UNWIND_MAX_MAPPINGS executable mappings
	COUNTER_COMPOSE_DEFERRED,  // first samples of a process walked once its mappings were read
	COUNTER_COMPOSE_GONE,      // reads not done: the thread exited or exec'd before its task work ran
	COUNTER_COMPOSE_REFUSED,   // reads not asked: no task work slot, or the kernel refused it
	COUNTER_UNWIND_STOP,       // first of UNWIND_STOP_MAX counters, by enum unwind_stop
	COUNTER_INTERP_STOP = COUNTER_UNWIND_STOP + UNWIND_STOP_MAX, // first of INTERP_STOP_MAX, by enum interp_stop
	COUNTER_JIT_FRAME = COUNTER_INTERP_STOP + INTERP_STOP_MAX, // first of JIT_FRAME_RESULT_MAX, by enum jit_frame_result
	COUNTER_MAX = COUNTER_JIT_FRAME + JIT_FRAME_RESULT_MAX,
};

// Set on a user[] entry (after the first) that is not a return address: an
// interrupted PC after a signal frame, and the signal trampoline itself,
// whose return address is its first instruction. User space names it
// as is instead of at the call before it.
#define FRAME_PC_EXACT (1ULL << FRAME_PC_EXACT_SHIFT)

// Rows the binary search can reach: 2^ROW_SEARCH_STEPS.
#define ROW_SEARCH_STEPS 24

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); // resized by the loader
} samples SEC(".maps");

#include "bpfcol_counters.h"
#include "bpfcol_procmaps.h"
#include "bpfcol_python.h"
#include "bpfcol_v8.h"
#include "bpfcol_walk.h"

// Anchor the record and flag types in BTF so bpf2go can mirror them in Go;
// they cost 8 bytes each of one .bss map.
const struct sample *unused_sample __attribute__((unused));
const enum sample_flag *unused_sample_flag __attribute__((unused));
const enum sample_layout *unused_sample_layout __attribute__((unused));
const enum unwind_stop *unused_unwind_stop __attribute__((unused));

// wakeup says whether a record sent now wakes user space. User space
// drains on a short timer, so a record wakes it only when the ringbuf is
// half full: no wakeup (and no context switch) per record, and still no
// loss under bursts.
static __always_inline u64 wakeup(void)
{
	if (bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&samples, BPF_RB_RING_SIZE) / 2)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

// submit hands a reserved record to user space.
static __always_inline void submit(struct sample *s)
{
	bpf_ringbuf_submit(s, wakeup());
}

// link_scope links s to the probe scope open on its thread, or else on the
// goroutine running on it: Go code keeps the g pointer in a register (R14,
// R28 on arm64), the key the
// scope programs use for Go scopes.
static __always_inline void link_scope(struct sample *s, struct pt_regs *regs)
{
	struct open_scope_key k = { .pid = s->pid, .kind = SCOPE_KIND_THREAD, .id = s->tid };
	struct scope_link *l = bpf_map_lookup_elem(&open_scopes, &k);
	if (!l) {
		k.kind = SCOPE_KIND_GOROUTINE;
		k.id = REGS_GO_G(regs);
		l = bpf_map_lookup_elem(&open_scopes, &k);
		if (!l)
			return;
	}
	s->link = *l;
	s->flags |= SAMPLE_SCOPE;
}

// kernel_stack fills kernel with the kernel stack of a perf event's
// sample (ctx) and returns its length in bytes. A sample taken in user
// mode has none: the helper would find that out only after taking its
// per-CPU callchain buffer, a few cache misses at each such sample.
static __always_inline s32 kernel_stack(void *ctx, u64 kernel[MAX_STACK_DEPTH])
{
	if (REGS_USER_MODE((struct pt_regs *)ctx))
		return 0;
	s32 n = bpf_get_stack(ctx, kernel, MAX_STACK_DEPTH * sizeof(u64), 0);
	// EFAULT: no kernel stack, not an error.
	if (n < 0 && n != -14)
		count(COUNTER_KERNEL_STACK_ERR);
	return n;
}

// fill_sample fills s with the current task's identity and stacks: the
// kernel stack from here, the user stack by CFI when the process's
// mappings are read, else by frame pointers. The on-CPU sampler and the
// off-CPU event share it, so both walk alike. Outside the on-CPU sampler
// (in_sampler false) the kernel stack is left empty, for the caller to
// take, and the walk keeps out of the sampler's row_memo. ctx is NULL in a
// task work callback, which runs in the task's own context but has none.
// It reports whether the process's mappings are read and stale: the
// interrupted PC, or a return address its walk found, lies outside them
// (ld.so still mapping libraries, dlopen, JIT). hs is set for a JVM's
// sample, s then being a struct sample_interp whose interpreter tail is
// empty: its HotSpot frames are added there; v8 likewise for a V8
// process's sample and its V8 frames.
static __always_inline bool fill_sample(void *ctx, struct sample *s, u64 pid_tgid, bool in_sampler,
					struct hs_proc *hs, struct v8_proc *v8)
{
	bool maps_stale = false;
	s->ktime_ns = bpf_ktime_get_ns();
	s->pid = pid_tgid >> 32;
	s->tid = (u32)pid_tgid;
	s->cpu = bpf_get_smp_processor_id();
	s->flags = 0;
	s->user_ip = 0;
	s->user_sp = 0;
	s->user_bp = 0;
	s->leaf_words[0] = 0;
	s->leaf_words[1] = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));

	s->kernel_bytes = 0;
	if (in_sampler)
		s->kernel_bytes = kernel_stack(ctx, s->kernel);

	struct task_struct *task = bpf_get_current_task_btf();
	if (task->flags & PF_KTHREAD) {
		s->flags |= SAMPLE_KERNEL_THREAD;
		s->user_bytes = 0;
	} else {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
		s->user_ip = REGS_PC(regs);
		s->user_sp = REGS_SP(regs);
		s->user_bp = REGS_FP(regs);
		// Off-CPU events link here too: the scope the thread blocked in.
		if (scope_links)
			link_scope(s, regs);
		u64 tramp = uretprobe_trampoline(task);
		// The window holds another thread's stack, or this one's as it
		// was: the walk starts it again.
		struct stack_window *win = in_sampler ? this_stack_window() : 0;
		if (win)
			win->len = 0;
		if (HAS_LINK_REGISTER) {
			s->leaf_words[0] = REGS_LR(regs);
			s->flags |= SAMPLE_LEAF_WORDS_VALID;
			// A leaf under a uretprobe: the trampoline is in LR, the
			// SP still the probed function's at entry.
			if (tramp && s->leaf_words[0] == tramp)
				s->leaf_words[0] = uretprobe_return(s->user_sp);
		} else if (bpf_probe_read_user(s->leaf_words, sizeof(s->leaf_words), (void *)s->user_sp) == 0) {
			// Read directly: the window would add its buffer to this
			// program's stack, over 6.1's 512 bytes for a call chain.
			s->flags |= SAMPLE_LEAF_WORDS_VALID;
			// A frameless leaf under a uretprobe: its return address,
			// at SP, is the trampoline's.
			if (tramp && s->leaf_words[0] == tramp)
				s->leaf_words[0] = uretprobe_return(s->user_sp);
			if (tramp && s->leaf_words[1] == tramp)
				s->leaf_words[1] = uretprobe_return(s->user_sp + 8);
		} else {
			count(COUNTER_SP_READ_ERR);
		}
		u32 tgid = s->pid;
		struct unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
		// Mappings of an earlier image (exec), or of an earlier process
		// with the same pid, are none.
		if (proc && (proc->count == 0 || !same_image(proc, task)))
			proc = 0;
		if (!proc || !unwind_cfi(s, proc, tramp, hs, REGS_HOTSPOT_BCP(regs), v8, in_sampler, &maps_stale)) {
			if (!proc) {
				s->flags |= SAMPLE_NO_TABLE;
				count(COUNTER_UNWIND_STOP + UNWIND_STOP_NO_TABLE);
			} else {
				maps_stale = true;
				count(COUNTER_UNWIND_STOP + UNWIND_STOP_OUTSIDE_MAPPINGS);
			}
			// Without a context (a task work) the task's own saved
			// registers start the walk, as ctx's would.
			if (ctx)
				s->user_bytes = bpf_get_stack(ctx, s->user, sizeof(s->user), BPF_F_USER_STACK);
			else
				s->user_bytes = bpf_get_task_stack(task, s->user, sizeof(s->user), BPF_F_USER_STACK);
			if (s->user_bytes < 0)
				count(COUNTER_USER_STACK_ERR);
		} else if (v8 && (s->flags & SAMPLE_UNKNOWN_MAPPING)) {
			// V8 maps JIT code as it runs: a caller there, under a
			// leaf in a library (an off-CPU wait), has the mappings
			// read again too.
			maps_stale = true;
		}
	}
	return maps_stale;
}

// The interpreter a process runs, and how its frames are walked, which
// user space (internal/interp) writes when it learns of it and deletes at
// the process's exit: one map for the three runtimes, so that a sample of
// any process, most of which run none, pays one lookup, not three.
enum interp_proc_kind {
	INTERP_PROC_CPYTHON = 1,
	INTERP_PROC_HOTSPOT = 2,
	INTERP_PROC_V8 = 3,
};

struct interp_proc {
	u32 kind; /* enum interp_proc_kind */
	u32 pad;
	union {
		struct py_proc py;
		struct hs_proc hs;
		struct v8_proc v8;
	};
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2304); /* resized by the loader */
	__type(key, u32);          /* tgid */
	__type(value, struct interp_proc);
} interp_procs SEC(".maps");

const struct interp_proc *unused_interp_proc __attribute__((unused));
const enum interp_proc_kind *unused_interp_proc_kind __attribute__((unused));

// interp_proc_of finds the interpreter process tgid runs: at most one of
// *py, *hs and *v8 is set, and only for a runtime whose frames are wanted.
static __always_inline void interp_proc_of(u32 tgid, struct py_proc **py, struct hs_proc **hs, struct v8_proc **v8)
{
	*py = 0;
	*hs = 0;
	*v8 = 0;
	if (!python_frames && !hotspot_frames && !v8_frames)
		return;
	struct interp_proc *p = bpf_map_lookup_elem(&interp_procs, &tgid);
	if (!p)
		return;
	if (p->kind == INTERP_PROC_CPYTHON && python_frames)
		*py = &p->py;
	else if (p->kind == INTERP_PROC_HOTSPOT && hotspot_frames)
		*hs = &p->hs;
	else if (p->kind == INTERP_PROC_V8 && v8_frames)
		*v8 = &p->v8;
}

// interp_begin empties r's interpreter tail before its native walk, which
// adds a JVM's or V8's frames to it.
static __always_inline void interp_begin(struct sample_interp *r)
{
	r->interp_frames = 0;
	r->interp_stop = INTERP_STOP_END;
}

// walk_interp ends r's interpreter tail after its native walk: CPython's
// frames are walked now (py), a JVM's or V8's were with the native ones.
static __always_inline void walk_interp(struct sample_interp *r, struct py_proc *py)
{
	if (r->s.flags & SAMPLE_KERNEL_THREAD)
		return;
	count(COUNTER_INTERP_SAMPLES);
	if (py) {
		walk_python(r, py, bpf_get_current_task_btf());
		return;
	}
	u32 stop = r->interp_stop;
	count(COUNTER_INTERP_STOP + (stop < INTERP_STOP_MAX ? stop : INTERP_STOP_BAD_LAYOUT));
}

// The record a sample of an interpreter's process is put together in
// before it is copied into the ringbuf at its length: reserved whole, its
// mostly empty tail of interpreter frames would fill the ringbuf four
// times faster. One per CPU: a perf_event program does not nest on its
// CPU.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct sample_interp);
} interp_scratch SEC(".maps");

// stack_bytes is how much of a stack array of a record to send: its
// filled bytes, none for an error.
static __always_inline u32 stack_bytes(s32 filled)
{
	if (filled <= 0)
		return 0;
	if (filled > MAX_STACK_DEPTH * 8)
		return MAX_STACK_DEPTH * 8;
	return filled & ~7;
}

// emit_packed sends r, an interpreter process's sample, packed
// (SAMPLE_PACKED): its stacks and interpreter frames take only the bytes
// they fill, a few hundred instead of the 2 KiB of its arrays, copied
// into a ringbuf's cold pages at every sample.
static __always_inline long emit_packed(struct sample_interp *r, u64 flags)
{
	u32 head = __builtin_offsetof(struct sample, kernel);
	u32 kb = stack_bytes(r->s.kernel_bytes);
	u32 ub = stack_bytes(r->s.user_bytes);
	u32 n = r->interp_frames;
	if (n > INTERP_MAX_FRAMES + 1)
		n = INTERP_MAX_FRAMES + 1;
	u64 tail = (u64)n * sizeof(struct interp_frame);
	// An add, not the or clang would make of it (the low bits are zero):
	// the verifier bounds an or by its bits, past the record.
	asm volatile("" : "+r"(tail));
	tail += 8;
	struct bpf_dynptr rec;
	if (bpf_ringbuf_reserve_dynptr(&samples, head + kb + ub + tail, 0, &rec)) {
		bpf_ringbuf_discard_dynptr(&rec, 0);
		return -1;
	}
	r->s.flags |= SAMPLE_PACKED;
	bpf_dynptr_write(&rec, 0, &r->s, head, 0);
	bpf_dynptr_write(&rec, head, r->s.kernel, kb, 0);
	bpf_dynptr_write(&rec, head + kb, r->s.user, ub, 0);
	bpf_dynptr_write(&rec, head + kb + ub, &r->interp_frames, tail, 0);
	bpf_ringbuf_submit_dynptr(&rec, flags);
	return 0;
}

// Set until a sampler's first sample: that one wakes the reader, which
// otherwise drains on a timer, so sampling is seen to start at once. Two
// CPUs racing for it only wake the reader twice.
u32 first_sample_pending = 1;

// The loader checks this declaration against the kernel's, kind by kind:
// struct bpf_map must be a struct there, not a forward declaration.
struct bpf_map {
	int opaque;
};

typedef int (*bpf_task_work_callback_t)(struct bpf_map *map, void *key, void *value);

extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw,
					      void *map__map, bpf_task_work_callback_t callback,
					      void *aux__prog) __ksym;

// emit hands a recorded sample to user space. The first one of a sampler
// wakes the reader.
static __always_inline void emit(struct sample *s)
{
	count(COUNTER_SAMPLES);
	if (first_sample_pending) {
		first_sample_pending = 0;
		bpf_ringbuf_submit(s, BPF_RB_FORCE_WAKEUP);
		return;
	}
	submit(s);
}

// A read of a process's mappings, by the thread it runs on (tid), from the
// sample that asked for it to the end of its task work; with the sample
// itself when it was the process's first (ktime set): that one is walked
// once the mappings are read, on the thread's return to user space, where
// its user registers are still those sampled.
struct compose_work {
	struct bpf_task_work tw;
	u64 ktime; // the sample's time; 0: a read only
	u64 mm;    // the address space it asked for
	u32 cpu;
	s32 kernel_bytes;
	u32 recompose; // asked by a walk that found the mappings read stale
	u32 pad;
	u64 asked; // when it was asked
	u64 kernel[MAX_STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 256);
	__type(key, u32);
	__type(value, struct compose_work);
} compose_works SEC(".maps");

// What a work entry is created from, zeroes (see off_cpu_empty_work).
struct compose_work_bytes {
	u8 b[sizeof(struct compose_work)];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct compose_work_bytes);
} compose_empty_work SEC(".maps");

// Per-CPU room for a PROCESS notice while it is composed: too large for
// the BPF stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct notice);
} compose_scratch SEC(".maps");

// Set by user space when sampling stops (Sampler.Stop).
u32 sampling_stopped = 0;

// Time spent in compose_walk and its runs: a task work callback is no
// program of its own, so the kernel's run-time statistics miss it.
u64 compose_walk_ns = 0;
u64 compose_walks = 0;

// ask_user asks user space to read the current process's mappings from
// /proc, where the kernel cannot have BPF read them: a READ notice with
// the identity its entry must carry, and the reads its samples asked for
// so far (flags bits 24-31, the backoff of recompose_due).
static __always_inline void ask_user(struct task_struct *task, u32 tgid, u64 now, u32 reads)
{
	struct notice *n = reserve_notice(NOTICE_READ, tgid, now, NOTICE_HEAD_BYTES);
	if (!n) {
		release_compose(tgid);
		return;
	}
	n->proc.mm = (u64)task->mm;
	n->proc.start_ns = image_start(task);
	n->proc.composed_ns = now;
	n->proc.flags = (reads > 255 ? 255 : reads) << 24;
	bpf_ringbuf_submit(n, BPF_RB_FORCE_WAKEUP);
}

// read_mappings reads the current process's executable mappings into its
// entry, at now, for a sample taken at since, and tells user space; after
// a read asked by a walk that found them stale (recompose), the next waits
// longer. It runs in the process's context (a task work): the VMA
// iterator takes the mmap lock.
static __always_inline void read_mappings(struct task_struct *task, u32 tgid, u64 now, u64 since, bool recompose)
{
	u32 zero = 0;
	struct notice *n = bpf_map_lookup_elem(&compose_scratch, &zero);
	if (!n)
		return;
	u32 reads = 0;
	if (recompose) {
		struct unwind_proc *old = bpf_map_lookup_elem(&unwind_procs, &tgid);
		if (old && same_image(old, task))
			reads = (old->flags >> 24) + 1;
	}
	if (compose(task, n, now, since))
		return;
	// Bits 24-31: reads asked by samples so far, the backoff.
	n->proc.flags |= (reads > 255 ? 255 : reads) << 24;
	long err = bpf_map_update_elem(&unwind_procs, &tgid, &n->proc, BPF_NOEXIST);
	if (err == 0)
		n->flags |= NOTICE_NEW;
	else if (err == -17 /* EEXIST */)
		err = bpf_map_update_elem(&unwind_procs, &tgid, &n->proc, BPF_ANY);
	if (err)
		count(COUNTER_PROCS_FULL);
	else
		notify(n);
}

// Set by the loader when BPF reads mappings (task work and the VMA
// iterator): the off-CPU task work then reads those of a process it walks
// without them.
const volatile bool compose_in_task_work = false;

// want_mappings has the mappings of the current process read, from a walk
// that is not a sample's (an off-CPU event), when it has none of its
// current image: now, from a task work (in_task_work), or asked of user
// space where BPF does not read them.
static __always_inline void want_mappings(struct task_struct *task, u64 now, bool in_task_work)
{
	u32 tgid = task->tgid;
	struct unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if ((proc && same_image(proc, task)) || !claim_compose(tgid, now))
		return;
	if (!compose_in_task_work)
		ask_user(task, tgid, now, 0);
	else if (in_task_work) {
		read_mappings(task, tgid, now, now, false);
		release_compose(tgid);
	} else {
		release_compose(tgid);
	}
}

// compose_walk is the task work of a read: it runs in the process's
// context, reads its executable mappings into unwind_procs, tells user
// space, and walks and sends the sample that asked, if any.
static int compose_walk(struct bpf_map *map, void *key, void *value)
{
	u64 t0 = bpf_ktime_get_ns();
	struct compose_work *w = value;
	struct task_struct *task = bpf_get_current_task_btf();
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32;
	// Run from the exit path, or after an exec: not the process asked for.
	if ((task->flags & PF_EXITING) || (u64)task->mm != w->mm) {
		count(COUNTER_COMPOSE_GONE);
		release_compose(tgid);
		goto done;
	}
	read_mappings(task, tgid, t0, w->ktime ? w->ktime : w->asked, w->recompose);
	release_compose(tgid);
	// After the sampler stopped, its last samples are being read to the
	// end: one sent now would be counted but never read.
	if (!w->ktime || sampling_stopped) {
		if (w->ktime)
			count(COUNTER_COMPOSE_GONE);
		goto done;
	}
	struct sample *s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		count(COUNTER_DROPPED_RINGBUF);
		goto done;
	}
	fill_sample(0, s, pid_tgid, false, 0, 0);
	s->ktime_ns = w->ktime;
	s->cpu = w->cpu;
	s->kernel_bytes = w->kernel_bytes;
	if (s->kernel_bytes > 0 && bpf_probe_read_kernel(s->kernel, sizeof(s->kernel), w->kernel))
		s->kernel_bytes = -14; // EFAULT
	emit(s);
done:
	bpf_map_delete_elem(&compose_works, key);
	__sync_fetch_and_add(&compose_walk_ns, bpf_ktime_get_ns() - t0);
	__sync_fetch_and_add(&compose_walks, 1);
	return 0;
}

// defer_compose schedules the read of the current process's mappings on
// the sampled thread, with this sample (ctx) when with_sample. It reports
// whether it did; the caller holds the claim, which is given back when not.
static __always_inline bool defer_compose(void *ctx, struct task_struct *task, u32 tid, u32 tgid, u64 now,
					  bool with_sample)
{
	u32 zero = 0;
	struct compose_work_bytes *empty = bpf_map_lookup_elem(&compose_empty_work, &zero);
	if (!empty || bpf_map_update_elem(&compose_works, &tid, empty, BPF_NOEXIST)) {
		count(COUNTER_COMPOSE_REFUSED);
		release_compose(tgid);
		return false;
	}
	struct compose_work *w = bpf_map_lookup_elem(&compose_works, &tid);
	if (!w) {
		release_compose(tgid);
		return false;
	}
	w->ktime = with_sample ? now : 0;
	w->asked = now;
	w->mm = (u64)task->mm;
	w->cpu = bpf_get_smp_processor_id();
	w->recompose = !with_sample;
	w->kernel_bytes = 0;
	if (with_sample)
		w->kernel_bytes = kernel_stack(ctx, w->kernel);
	if (bpf_task_work_schedule_resume_impl(task, &w->tw, &compose_works, compose_walk, 0)) {
		count(COUNTER_COMPOSE_REFUSED);
		bpf_map_delete_elem(&compose_works, &tid);
		release_compose(tgid);
		return false;
	}
	if (with_sample)
		count(COUNTER_COMPOSE_DEFERRED);
	return true;
}

// sample_interp_stack records a sample of a process that runs CPython, a
// JVM or V8. It reports, as fill_sample, whether the process's mappings
// read are stale, with the sample's time in *ktime.
static __always_inline bool sample_interp_stack(void *ctx, u64 pid_tgid, struct py_proc *py, struct hs_proc *hs,
						struct v8_proc *v8, u64 *ktime)
{
	u32 zero = 0;
	struct sample_interp *r = bpf_map_lookup_elem(&interp_scratch, &zero);
	if (!r)
		return false;
	interp_begin(r);
	bool maps_stale = fill_sample(ctx, &r->s, pid_tgid, true, hs, v8);
	*ktime = r->s.ktime_ns;
	walk_interp(r, py);
	u64 flags = wakeup();
	if (first_sample_pending) {
		first_sample_pending = 0;
		flags = BPF_RB_FORCE_WAKEUP;
	}
	if (emit_packed(r, flags))
		count(COUNTER_DROPPED_RINGBUF);
	else
		count(COUNTER_SAMPLES);
	return maps_stale;
}

// sample records the current task's stacks. A process whose mappings
// were never read from its current image has them read, by BPF on the
// thread's return to user space (compose_in_bpf), which then walks this
// sample, or by user space, asked with a notice. A sample whose walk
// finds them stale has them read again.
static __always_inline int sample(void *ctx, bool compose_in_bpf)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tid = (u32)pid_tgid;
	u32 tgid = pid_tgid >> 32;
	if (tid == 0) {
		count(COUNTER_IDLE);
		return 0;
	}
	struct task_struct *task = bpf_get_current_task_btf();
	bool user = !(task->flags & (PF_KTHREAD | PF_EXITING));
	if (user) {
		struct unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
		if (!proc || !same_image(proc, task)) {
			u64 now = bpf_ktime_get_ns();
			if (claim_compose(tgid, now)) {
				if (!compose_in_bpf)
					ask_user(task, tgid, now, 0);
				else if (defer_compose(ctx, task, tid, tgid, now, true))
					return 0; // walked by compose_walk
			}
		}
	}

	bool maps_stale;
	u64 ktime;
	struct py_proc *py;
	struct hs_proc *hs;
	struct v8_proc *v8;
	interp_proc_of(tgid, &py, &hs, &v8);
	if (py || hs || v8) {
		maps_stale = sample_interp_stack(ctx, pid_tgid, py, hs, v8, &ktime);
	} else {
		struct sample *s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
		if (!s) {
			count(COUNTER_DROPPED_RINGBUF);
			return 0;
		}
		maps_stale = fill_sample(ctx, s, pid_tgid, true, 0, 0);
		ktime = s->ktime_ns;
		emit(s);
	}
	if (user && maps_stale) {
		struct unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
		if (proc && recompose_due(proc, ktime) && claim_compose(tgid, ktime)) {
			if (!compose_in_bpf)
				ask_user(task, tgid, ktime, (proc->flags >> 24) + 1);
			else
				defer_compose(ctx, task, tid, tgid, ktime, false);
		}
	}
	return 0;
}

SEC("perf_event")
int sample_stack(void *ctx)
{
	return sample(ctx, true);
}

// The sampler of kernels without task work or the VMA iterator: user
// space reads processes' mappings.
SEC("perf_event")
int sample_stack_user(void *ctx)
{
	return sample(ctx, false);
}

// proc_exit forgets a process whose last thread exits, and tells user
// space when it had read its mappings. An exiting thread's read, waiting
// for its task work, goes with its entry (the work is cancelled). It runs
// at every thread exit of the host: each map is looked up first, without
// a lock, and deleted from (which takes the bucket's lock) only when it
// holds the key, as for few exits it does.
SEC("tp_btf/sched_process_exit")
int proc_exit(u64 *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx[0];
	u32 tid = task->pid;
	if (bpf_map_lookup_elem(&compose_works, &tid))
		bpf_map_delete_elem(&compose_works, &tid);
	if (task->signal->live.counter != 0)
		return 0;
	u32 tgid = task->tgid;
	if (bpf_map_lookup_elem(&composing, &tgid))
		release_compose(tgid);
	if (bpf_map_lookup_elem(&unwind_procs, &tgid) && bpf_map_delete_elem(&unwind_procs, &tgid) == 0)
		notice_exit(tgid);
	return 0;
}

#include "bpfcol_offcpu.h"
