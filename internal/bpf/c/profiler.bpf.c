// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// On-CPU stack sampler: one perf_event program per CPU on the software
// cpu-clock. Each sample carries both stacks, copied with bpf_get_stack into
// the record itself, so no stack-id hash table can collide and drop one.
// Records go to a ringbuf that user space drains; every sample that cannot
// be recorded is counted.
//
// User stacks are walked with the CFI tables user space loads into
// unwind_files/unwind_rows (bpfcol_unwind.h), through the process's
// mappings that BPF reads itself (bpfcol_procmaps.h); a process not read
// yet is walked by bpf_get_stack's frame pointers, as are mappings without
// CFI.

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
	// User registers at the sample, and the two words at the user SP: the
	// return address of a function that has not pushed a frame sits there,
	// and frame-pointer walking cannot see it.
	u64 user_ip;
	u64 user_sp;
	u64 user_bp;
	u64 sp_words[2];
	u64 off_cpu_ns; // SAMPLE_OFF_CPU: time from switch-out to switch-in
	struct scope_link link; // SAMPLE_SCOPE: the probe scope open at the sample
	char comm[16];
	u64 kernel[MAX_STACK_DEPTH];
	u64 user[MAX_STACK_DEPTH];
};

// Flags of a sample, generated for Go by bpf2go (-type sample_flag).
enum sample_flag {
	SAMPLE_KERNEL_THREAD = 1U << 0,
	SAMPLE_SP_WORDS_VALID = 1U << 1,
	SAMPLE_CFI = 1U << 2,             // user[] was walked with CFI tables
	SAMPLE_COMPLETE = 1U << 3,        // the walk reached the process root
	SAMPLE_UNKNOWN_MAPPING = 1U << 4, // an address outside the loaded mappings
	SAMPLE_NO_TABLE = 1U << 5,        // the process's tables are not loaded
	SAMPLE_LEAF_FP = 1U << 6,         // the CFI walk left the leaf by its frame pointer
	SAMPLE_OFF_CPU = 1U << 7,         // an off-CPU event: stacks at switch-out, weighted by off_cpu_ns
	SAMPLE_PREEMPTED = 1U << 12,      // off-CPU while still runnable (preempted or yielded), not blocked
	SAMPLE_SCOPE = 1U << 13,          // link holds the probe scope open on the thread or goroutine
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

// Largest user address on x86-64 with 4-level paging.
#define MAX_USER_ADDR 0x00007fffffffffffULL

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

// Mappable: user space writes rows through a shared mapping, a memory
// copy, instead of one map update per row.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1 << 20); // resized by the loader
	__type(key, u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

// Registers and outcome of one CFI walk. unwind_frame, a global function,
// reads and writes it: the verifier checks that function once for any
// contents, so the bpf_loop callback's state is the same at every
// iteration and converges at once, instead of being walked once per
// frame count and register range.
struct walk_regs {
	u64 pc, sp, bp;
	u64 tramp;      // the process's uretprobe trampoline, 0 if none
	u32 n;          // frames written to s->user
	u32 stop;       // enum unwind_stop, valid once stopped
	u8 stopped;
	u8 exact_pc;    // pc is an interrupted PC, not a return address
	u8 bp_known;    // bp holds this frame's RBP
	u8 leaf_fp;     // the leaf was left by its frame pointer: its caller may be lost
	u8 fp_step;     // the last frame recorded was stepped through by its frame pointer
	u8 pc_by_cfi;   // pc was read where a table's rule says: a true return address
	u8 sampler;     // the on-CPU sampler's walk: it keeps this CPU's row_memo and stack_window
	u8 pad;
};

// A row a walk on this CPU found for a return address, with what made it
// valid: the process's mappings as composed then (a recomposition gives
// another composed_ns), and the second it was found in. A hot loop's
// stack repeats from sample to sample, so most frames are one read of
// this memo instead of the mapping search, the file's entry, its index
// and its rows, each a cache miss 50 ms after the CPU's last sample.
// Only the perf_event sampler uses it (and stack_window): it never nests
// on its CPU, so an entry is never read half-way through a write.
struct row_memo {
	u64 pc;          // the address looked up (the call's, for a return address)
	u64 composed_ns; // unwind_proc.composed_ns it was found under
	u32 tgid;
	u32 second;      // ktime >> 30 when found: a file's used mark is refreshed each second
	struct unwind_row row;
};

#define ROW_MEMO_BITS 9 // 512 slots per CPU, direct-mapped

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << ROW_MEMO_BITS);
	__type(key, u32);
	__type(value, struct row_memo);
} row_memo SEC(".maps");

// row_memo_slot is this CPU's memo slot for address pc of process tgid.
static __always_inline struct row_memo *row_memo_slot(u64 pc, u32 tgid)
{
	u32 key = ((pc ^ ((u64)tgid << 40)) * 0x9e3779b97f4a7c15ULL) >> (64 - ROW_MEMO_BITS);
	return bpf_map_lookup_elem(&row_memo, &key);
}

// The page of the user stack a sampler's walk last read, copied whole:
// the frames in one page are then one bpf_probe_read_user, not one or
// two each (a call costs 0.25-0.4 us here, cold or not). A read stays
// within its page, so a mapped stack never fails it.
#define STACK_WINDOW_WORDS 512 // 4 KiB, a page

struct stack_window {
	u64 base; // user address of words[0]
	u64 len;  // bytes held; 0 when none (each sampler walk starts empty)
	// One word more than a page: a two-word read at the last index stays
	// in the value (len keeps it from ever reading that word).
	u64 words[STACK_WINDOW_WORDS + 1];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct stack_window);
} stack_window SEC(".maps");

static __always_inline struct stack_window *this_stack_window(void)
{
	u32 zero = 0;
	return bpf_map_lookup_elem(&stack_window, &zero);
}

struct stack_words {
	u64 w[2];
};

// stack_read reads n words (1 or 2) of the user stack at addr into dst, as
// bpf_probe_read_user does; a sampler's walk (sampler) reads them through
// this CPU's stack_window. A global function: the verifier checks it once,
// not at each read of every walk.
__noinline long stack_read(struct stack_words *dst, u64 addr, u32 n, u32 sampler)
{
	if (!dst)
		return -1;
	u32 size = n == 2 ? 16 : 8;
	struct stack_window *win = sampler && !(addr & 7) ? this_stack_window() : 0;
	if (!win)
		return bpf_probe_read_user(dst, size, (void *)addr);
	u64 off = addr - win->base;
	if (off >= win->len || win->len - off < size) {
		u64 len = STACK_WINDOW_WORDS * 8 - (addr & (STACK_WINDOW_WORDS * 8 - 1));
		if (len < size)
			return bpf_probe_read_user(dst, size, (void *)addr);
		win->len = 0;
		long err = bpf_probe_read_user(win->words, len, (void *)addr);
		if (err)
			return err;
		win->base = addr;
		win->len = len;
		off = 0;
	}
	u64 i = (off >> 3) & (STACK_WINDOW_WORDS - 1);
	dst->w[0] = win->words[i];
	if (n == 2)
		dst->w[1] = win->words[i + 1];
	return 0;
}

// Anchor the record and flag types in BTF so bpf2go can mirror them in Go;
// they cost 8 bytes each of one .bss map.
const struct sample *unused_sample __attribute__((unused));
const enum sample_flag *unused_sample_flag __attribute__((unused));
const enum sample_layout *unused_sample_layout __attribute__((unused));
const enum unwind_stop *unused_unwind_stop __attribute__((unused));

// The searches below take no branch on the data they read (only on how
// many steps remain): the verifier then walks one path through them
// instead of one per outcome of every comparison.

// le returns 1 if a <= b, else 0, without a branch.
static __always_inline u64 le(u64 a, u64 b)
{
	u64 r = ((b - a) >> 63) ^ 1; // a, b < 2^63
	asm volatile("" : "+r"(r));  // keep clang from turning it into a branch
	return r;
}

// find_mapping returns the index of the mapping holding addr, or -1. It
// and find_row are global functions: the verifier checks each once.
__noinline int find_mapping(struct unwind_proc *proc, u64 addr)
{
	if (!proc || addr > MAX_USER_ADDR)
		return -1;
	u64 len = proc->count;
	if (len == 0 || len > UNWIND_MAX_MAPPINGS)
		return -1;
	// Last mapping with start <= addr.
	u64 base = 0;
	for (int i = 0; i < 10 && len > 1; i++) {
		u64 half = len >> 1;
		base += le(proc->mappings[(base + half) & (UNWIND_MAX_MAPPINGS - 1)].start, addr) * half;
		len -= half;
	}
	struct unwind_mapping *m = &proc->mappings[base & (UNWIND_MAX_MAPPINGS - 1)];
	if (addr < m->start || addr >= m->end)
		return -1;
	return base & (UNWIND_MAX_MAPPINGS - 1);
}

// index_entry reads entry g of the index at row slot at (struct
// unwind_file): two u32 entries per slot.
static __always_inline s64 index_entry(u32 at, u64 g)
{
	u32 key = at + (u32)(g >> 1);
	u32 *e = bpf_map_lookup_elem(&unwind_rows, &key);
	if (!e)
		return -1;
	return e[g & 1];
}

// find_row returns the index in unwind_rows of the row of f's table
// covering file offset foff, or -1 when the table has none (foff before
// its first row, or beyond 32 bits of it). The table's index bounds the
// search to the rows of foff's granule.
__noinline s64 find_row(struct unwind_file *f, u64 foff)
{
	if (!f || foff < f->row_base || foff - f->row_base > 0xffffffffULL)
		return -1;
	u64 target = foff - f->row_base;
	u32 first = f->row_first;
	u64 count = f->row_count;
	u32 shift = f->index_shift;
	if (count == 0 || count > (1ULL << ROW_SEARCH_STEPS) || shift > 32)
		return -1;
	u64 g = target >> shift;
	s64 lo = count - 1, hi = count - 1;
	// Past the last granule: the last row.
	if (g < f->index_granules) {
		u32 at = first + (u32)count;
		lo = index_entry(at, g);
		hi = index_entry(at, g + 1);
	}
	if (lo < 0 || hi < lo || hi >= count)
		return -1;
	// Last row in [lo, hi] with pc <= target.
	u64 base = lo, len = hi - lo + 1;
	for (int i = 0; i < ROW_SEARCH_STEPS && len > 1; i++) {
		u64 half = len >> 1;
		u32 key = first + (u32)(base + half);
		struct unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &key);
		if (!r)
			return -1;
		base += le(r->pc, target) * half;
		len -= half;
	}
	u32 key = first + (u32)base;
	struct unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &key);
	if (!r || r->pc > target)
		return -1;
	return key;
}

static __always_inline long stop(struct walk_regs *w, u32 reason)
{
	w->stop = reason;
	w->stopped = 1;
	return 1;
}

// step_fp unwinds one frame by its frame pointer: the caller's RBP at [RBP],
// the return address at [RBP+8].
static __always_inline long step_fp(struct walk_regs *w, u32 reason)
{
	w->fp_step = 1;
	if (w->n == 1)
		w->leaf_fp = 1;
	// The outermost frame of code that keeps frame pointers (Go's
	// runtime.goexit, a thread's first JIT frame) saved a zero RBP.
	if (w->bp_known && w->bp == 0 && reason == UNWIND_STOP_NO_CFI)
		return stop(w, UNWIND_STOP_FP_END);
	if (!w->bp_known || w->bp < w->sp || w->bp > MAX_USER_ADDR)
		return stop(w, reason);
	struct stack_words frame;
	if (stack_read(&frame, w->bp, 2, w->sampler))
		return stop(w, reason);
	w->sp = w->bp + 16;
	w->bp = frame.w[0];
	w->pc = frame.w[1];
	w->exact_pc = 0;
	w->pc_by_cfi = 0;
	return 0;
}

#include "bpfcol_hotspot.h"

// Offsets in the ucontext that a signal handler returns through
// (__restore_rt): uc_mcontext starts at 40, gregs in REG_* order.
#define UC_RBP (40 + 10 * 8)
#define UC_RSP (40 + 15 * 8)
#define UC_RIP (40 + 16 * 8)

// unwind_frame records the frame at w->pc in s->user and steps w to its
// caller. It returns 1 once the walk stopped (w->stop says why), else 0.
__noinline long unwind_frame(struct walk_regs *w, struct sample *s, struct unwind_proc *proc)
{
	if (!w || !s || !proc)
		return 1;
	w->fp_step = 0;
	u64 pc = w->pc;
	// A uretprobe's trampoline in place of this return address, read
	// from the slot right under the caller's SP.
	if (pc == w->tramp && pc && !w->exact_pc) {
		pc = uretprobe_return(w->sp - 8);
		if (!pc)
			return stop(w, UNWIND_STOP_URETPROBE);
		w->pc = pc;
	}
	if (pc == 0 || pc > MAX_USER_ADDR)
		return stop(w, UNWIND_STOP_OUTSIDE_MAPPINGS);
	// A return address follows the call: the call itself is at pc-1, which
	// is also what keeps a noreturn call at a function's end in its FDE.
	u64 lookup = w->exact_pc ? pc : pc - 1;
	u32 second = s->ktime_ns >> 30;
	struct row_memo *memo = w->sampler ? row_memo_slot(lookup, s->pid) : 0;
	bool memoized = memo && memo->pc == lookup && memo->composed_ns == proc->composed_ns &&
			memo->tgid == s->pid && memo->second == second;
	int mi = 0;
	if (!memoized) {
		mi = find_mapping(proc, lookup);
		if (mi < 0) {
			s->flags |= SAMPLE_UNKNOWN_MAPPING;
			return stop(w, UNWIND_STOP_OUTSIDE_MAPPINGS);
		}
	}
	u32 n = w->n;
	if (n >= MAX_STACK_DEPTH)
		return stop(w, UNWIND_STOP_DEPTH_LIMIT);
	s->user[n] = pc | (w->exact_pc && n > 0 ? FRAME_PC_EXACT : 0);
	w->n = n + 1;

	struct stack_words words;
	// The row: the memo's, or the table's (then memoized).
	struct unwind_row *r;
	if (memoized) {
		r = &memo->row;
	} else {
		struct unwind_mapping *m = &proc->mappings[mi & (UNWIND_MAX_MAPPINGS - 1)];
		if (m->kind == UNWIND_MAPPING_ANON)
			return step_fp(w, UNWIND_STOP_NO_CFI);
		// The file's table serves every process that maps it.
		struct unwind_file_key k = file_key(m);
		struct unwind_file *f = bpf_map_lookup_elem(&unwind_files, &k);
		if (!f) {
			if (m->kind != UNWIND_MAPPING_FILE)
				return step_fp(w, UNWIND_STOP_NO_CFI);
			announce(&k, m, s->pid, s->ktime_ns);
			return step_fp(w, UNWIND_STOP_NO_TABLE);
		}
		// Written only when it changes, about once a second: every CPU
		// reads the entry, and a write takes its cache line from them.
		if (f->used != second)
			f->used = second;
		if (f->state == UNWIND_FILE_PENDING)
			return step_fp(w, UNWIND_STOP_NO_TABLE);
		if (f->state != UNWIND_FILE_CFI)
			return step_fp(w, UNWIND_STOP_NO_CFI);
		s64 ri = find_row(f, lookup - m->file_base);
		if (ri < 0)
			return step_fp(w, UNWIND_STOP_NO_CFI);
		u32 rkey = ri;
		r = bpf_map_lookup_elem(&unwind_rows, &rkey);
		if (!r)
			return step_fp(w, UNWIND_STOP_NO_CFI);
		if (memo) {
			memo->pc = lookup;
			memo->composed_ns = proc->composed_ns;
			memo->tgid = s->pid;
			memo->second = second;
			memo->row = *r;
		}
	}

	u8 cfa_rule = r->rules & 0xf, rbp_rule = r->rules >> 4;
	u64 cfa;
	switch (cfa_rule) {
	case UNWIND_CFA_RSP:
		cfa = w->sp + r->cfa_off;
		break;
	case UNWIND_CFA_RBP:
		if (!w->bp_known)
			return stop(w, UNWIND_STOP_UNSUPPORTED);
		cfa = w->bp + r->cfa_off;
		break;
	case UNWIND_CFA_PLT:
		cfa = w->sp + r->cfa_off + ((pc & 15) >= UNWIND_PLT_THRESHOLD ? 8 : 0);
		break;
	case UNWIND_CFA_SIGNAL: {
		if (n > 0)
			s->user[n] = pc | FRAME_PC_EXACT;
		// The registers the handler returns with: rbp, rsp, rip, read
		// one by one into one buffer (6.1 allows 512 bytes of stack for
		// a whole call chain).
		u64 uc = w->sp;
		if (stack_read(&words, uc + UC_RBP, 1, w->sampler))
			return stop(w, UNWIND_STOP_READ_FAULT);
		w->bp = words.w[0];
		w->bp_known = 1;
		if (stack_read(&words, uc + UC_RSP, 1, w->sampler))
			return stop(w, UNWIND_STOP_READ_FAULT);
		w->sp = words.w[0];
		if (stack_read(&words, uc + UC_RIP, 1, w->sampler))
			return stop(w, UNWIND_STOP_READ_FAULT);
		w->pc = words.w[0];
		w->exact_pc = 1; // the interrupted PC, not a return address
		w->pc_by_cfi = 1;
		return 0;
	}
	case UNWIND_CFA_END:
		return stop(w, UNWIND_STOP_COMPLETE);
	case UNWIND_CFA_NONE:
		return step_fp(w, UNWIND_STOP_NO_CFI);
	default:
		return stop(w, UNWIND_STOP_UNSUPPORTED);
	}
	// Every frame's CFA lies above the frame below it.
	if (cfa <= w->sp || cfa > MAX_USER_ADDR)
		return stop(w, UNWIND_STOP_BAD_CFA);

	u64 ra;
	if (rbp_rule == UNWIND_RBP_AT_CFA && r->rbp_off == -2) {
		// The usual frame: saved RBP right under the return address.
		if (stack_read(&words, cfa - 16, 2, w->sampler))
			return stop(w, UNWIND_STOP_READ_FAULT);
		w->bp = words.w[0];
		w->bp_known = 1;
		ra = words.w[1];
	} else {
		s64 rbp_off = r->rbp_off;
		if (stack_read(&words, cfa - 8, 1, w->sampler))
			return stop(w, UNWIND_STOP_READ_FAULT);
		ra = words.w[0];
		switch (rbp_rule) {
		case UNWIND_RBP_UNCHANGED:
			break;
		case UNWIND_RBP_AT_CFA:
			if (stack_read(&words, cfa + rbp_off * 8, 1, w->sampler))
				return stop(w, UNWIND_STOP_READ_FAULT);
			w->bp = words.w[0];
			w->bp_known = 1;
			break;
		default:
			w->bp_known = 0;
		}
	}
	w->sp = cfa;
	w->pc = ra;
	w->exact_pc = 0;
	w->pc_by_cfi = 1;
	return 0;
}

// State of one CFI walk, shared with the bpf_loop callback. The pointers
// stay out of regs: a global function's memory argument comes back to
// the caller as unknown scalars.
struct walk {
	struct sample *s;
	struct unwind_proc *proc;
	// A process runs one JIT runtime at most: its state shares its place
	// with the other's, which keeps the off-CPU walk's stack and the
	// HotSpot frame step within BPF's 512 bytes.
	union {
		// Set for a JVM's sample, then s is a struct sample_interp:
		// the frames in its code cache are walked by hotspot_frame.
		struct {
			struct hs_proc *hs;
			struct hs_walk hx;
		};
		// Set for a V8 process's sample, s then a struct
		// sample_interp: its frames stepped by frame pointer are read
		// as V8 frames (unwind_step_v8, which never reads hs).
		struct {
			struct v8_proc *v8;
			struct v8_walk v8w;
		};
	};
	struct walk_regs regs;
};

// unwind_step is the bpf_loop callback: one frame per iteration.
static long unwind_step(u64 i, struct walk *w)
{
	if (w->hs && hotspot_pc(w->hs, w->regs.pc)) {
		w->regs.pc_by_cfi = 0;
		return hotspot_frame(&w->regs, (struct sample_interp *)w->s, w->hs, &w->hx) ? 1 : 0;
	}
	return unwind_frame(&w->regs, w->s, w->proc) ? 1 : 0;
}

// unwind_step_v8 is unwind_step for a V8 process, whose record is a
// sample_interp: a frame stepped through by its frame pointer (V8's code
// has no CFI) is read as a V8 frame too, from its frame pointer before
// the step.
static long unwind_step_v8(u64 i, struct walk *w)
{
	w->v8w.fp = w->regs.bp_known ? w->regs.bp : 0;
	w->v8w.n = w->regs.n;
	long stopped = unwind_frame(&w->regs, w->s, w->proc);
	if (w->regs.fp_step && w->regs.n == w->v8w.n + 1 && w->v8w.fp)
		v8_frame(&w->v8w, (struct sample_interp *)w->s, w->v8);
	return stopped ? 1 : 0;
}

// unwind_cfi walks the user stack of a loaded process into s->user. It
// returns false when the interrupted PC is in none of the process's known
// mappings, so the caller falls back to frame pointers. It sets *stale
// when the walk ended at a return address that a table's rule gave but no
// mapping read holds: a library mapped after the read (ld.so maps them one
// by one, a process may be first sampled in between). With hs (a JVM's
// sample, s a struct sample_interp), its HotSpot frames are walked too,
// bcp being the user R13; with v8 (a V8 process's, s alike), its V8 frames.
// sampler: the walk is the on-CPU sampler's (struct walk_regs).
static __always_inline bool unwind_cfi(struct sample *s, struct unwind_proc *proc, u64 tramp, struct hs_proc *hs,
				       u64 bcp, struct v8_proc *v8, bool sampler, bool *stale)
{
	// In the uretprobe trampoline, the probed function has returned: the
	// walk starts where it returns to. Elsewhere in [uprobes], a probed
	// instruction is being stepped out of line, for its function.
	u64 pc = s->user_ip, sp = s->user_sp;
	if (tramp && pc - tramp < URETPROBE_TRAMPOLINE_BYTES)
		uretprobe_returned(&pc, &sp);
	else if (tramp)
		pc = uprobe_stepped_pc(pc);
	struct walk w = {
		.s = s,
		.proc = proc,
		.regs = {
			.pc = pc,
			.sp = sp,
			.bp = s->user_bp,
			.tramp = tramp,
			.exact_pc = 1,
			.bp_known = 1,
			.sampler = sampler,
		},
	};
	if (v8) {
		w.v8 = v8;
		bpf_loop(MAX_STACK_DEPTH, unwind_step_v8, &w, 0);
	} else {
		w.hs = hs;
		w.hx.bcp = bcp;
		w.hx.stop = INTERP_STOP_END;
		bpf_loop(MAX_STACK_DEPTH, unwind_step, &w, 0);
	}
	if (hs)
		((struct sample_interp *)s)->interp_stop = w.hx.stop;
	struct walk_regs *r = &w.regs;
	if (r->n == 0) {
		// The leaf is not in a loaded mapping (a new library or JIT
		// region): frame pointers for now, the mappings re-read.
		s->flags |= SAMPLE_UNKNOWN_MAPPING;
		return false;
	}
	if (!r->stopped)
		r->stop = UNWIND_STOP_DEPTH_LIMIT;
	s->flags |= SAMPLE_CFI | ((r->stop & SAMPLE_STOP_MASK) << SAMPLE_STOP_SHIFT);
	if (r->leaf_fp)
		s->flags |= SAMPLE_LEAF_FP;
	if (r->stop == UNWIND_STOP_OUTSIDE_MAPPINGS && r->pc_by_cfi && r->pc && r->pc <= MAX_USER_ADDR)
		*stale = true;
	if (r->stop == UNWIND_STOP_COMPLETE || r->stop == UNWIND_STOP_FP_END)
		s->flags |= SAMPLE_COMPLETE;
	s->user_bytes = r->n * sizeof(u64);
	count(COUNTER_UNWIND_STOP + r->stop);
	return true;
}

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
// goroutine running on it: Go code keeps the g pointer in R14, the key the
// scope programs use for Go scopes.
static __always_inline void link_scope(struct sample *s, struct pt_regs *regs)
{
	struct open_scope_key k = { .pid = s->pid, .kind = SCOPE_KIND_THREAD, .id = s->tid };
	struct scope_link *l = bpf_map_lookup_elem(&open_scopes, &k);
	if (!l) {
		k.kind = SCOPE_KIND_GOROUTINE;
		k.id = regs->r14;
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
	if (((struct pt_regs *)ctx)->cs & 3)
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
	s->sp_words[0] = 0;
	s->sp_words[1] = 0;
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
		s->user_ip = regs->ip;
		s->user_sp = regs->sp;
		s->user_bp = regs->bp;
		// Off-CPU events link here too: the scope the thread blocked in.
		if (scope_links)
			link_scope(s, regs);
		u64 tramp = uretprobe_trampoline(task);
		// The window holds another thread's stack, or this one's as it
		// was: the walk starts it again.
		struct stack_window *win = in_sampler ? this_stack_window() : 0;
		if (win)
			win->len = 0;
		// Read directly: the window would add its buffer to this
		// program's stack, over 6.1's 512 bytes for a call chain.
		if (bpf_probe_read_user(s->sp_words, sizeof(s->sp_words), (void *)s->user_sp) == 0) {
			s->flags |= SAMPLE_SP_WORDS_VALID;
			// A frameless leaf under a uretprobe: its return address,
			// at SP, is the trampoline's.
			if (tramp && s->sp_words[0] == tramp)
				s->sp_words[0] = uretprobe_return(s->user_sp);
			if (tramp && s->sp_words[1] == tramp)
				s->sp_words[1] = uretprobe_return(s->user_sp + 8);
		} else {
			count(COUNTER_SP_READ_ERR);
		}
		u32 tgid = s->pid;
		struct unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
		// Mappings of an earlier image (exec), or of an earlier process
		// with the same pid, are none.
		if (proc && (proc->count == 0 || !same_image(proc, task)))
			proc = 0;
		if (!proc || !unwind_cfi(s, proc, tramp, hs, regs->r13, v8, in_sampler, &maps_stale)) {
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

// python_proc returns the CPython state of process tgid, when CPython
// frames are wanted and the process runs CPython.
static __always_inline struct py_proc *python_proc(u32 tgid)
{
	if (!python_frames)
		return 0;
	return bpf_map_lookup_elem(&py_procs, &tgid);
}

// v8_proc returns the V8 layout of process tgid, when V8 frames are
// wanted and the process runs V8.
static __always_inline struct v8_proc *v8_proc(u32 tgid)
{
	if (!v8_frames)
		return 0;
	return bpf_map_lookup_elem(&v8_procs, &tgid);
}

// hotspot_proc returns the HotSpot state of process tgid, when HotSpot
// frames are wanted and the process runs a JVM.
static __always_inline struct hs_proc *hotspot_proc(u32 tgid)
{
	if (!hotspot_frames)
		return 0;
	return bpf_map_lookup_elem(&hs_procs, &tgid);
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

// interp_record_bytes is the length of r up to its last interpreter frame.
static __always_inline u64 interp_record_bytes(struct sample_interp *r)
{
	u64 n = r->interp_frames;
	if (n > INTERP_MAX_FRAMES + 1)
		n = INTERP_MAX_FRAMES + 1;
	return __builtin_offsetof(struct sample_interp, frames) + n * sizeof(struct interp_frame);
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
	if (bpf_ringbuf_output(&samples, r, interp_record_bytes(r), flags))
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
	struct py_proc *py = python_proc(tgid);
	struct hs_proc *hs = py ? 0 : hotspot_proc(tgid);
	struct v8_proc *v8 = py || hs ? 0 : v8_proc(tgid);
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
	struct py_proc *py = python_proc(pid_tgid >> 32);
	struct hs_proc *hs = py ? 0 : hotspot_proc(pid_tgid >> 32);
	struct v8_proc *v8 = py || hs ? 0 : v8_proc(pid_tgid >> 32);
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
