/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The user-stack walk of profiler.bpf.c: the CFI rows user space loads,
 * the per-CPU memo of rows found and the page of stack read at once, the
 * searches for a PC's mapping and row, one frame's step (CFI, frame
 * pointer, signal frame, JIT code), and the bpf_loop over the frames.
 *
 * Included once, by profiler.bpf.c, after the sample ringbuf, the
 * counters and the process, CPython and V8 headers.
 */

#ifndef BPFCOL_WALK_H
#define BPFCOL_WALK_H

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
	u64 pc, sp, bp; // bp: the frame pointer (RBP, x29)
	u64 lr;         // the link register (arm64's x30), valid while lr_known
	u64 tramp;      // the process's uretprobe trampoline, 0 if none
	u16 n;          // frames written to s->user
	u8 stop;        // enum unwind_stop, valid once stopped
	// Flags in bits: the struct is on the sampler's stack, which 6.1
	// bounds at 512 bytes for a whole call chain (frames rounded to 32).
	u8 stopped : 1;
	u8 exact_pc : 1;  // pc is an interrupted PC, not a return address
	u8 bp_known : 1;  // bp holds this frame's frame pointer
	u8 leaf_fp : 1;   // the leaf was left by its frame pointer: its caller may be lost
	u8 fp_step : 1;   // the last frame recorded was stepped through by its frame pointer
	u8 pc_by_cfi : 1; // pc was read where a table's rule says: a true return address
	u8 sampler : 1;   // the on-CPU sampler's walk: it keeps this CPU's row_memo and stack_window
	u8 lr_known : 1;  // lr holds this frame's link register: the interrupted one, or a signal frame's
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

// step_fp unwinds one frame by its frame pointer, through the frame record
// it points at: the caller's frame pointer at [FP], the return address at
// [FP+8] (x86-64's push rbp after the call's push, arm64's stp x29, x30).
static __always_inline long step_fp(struct walk_regs *w, u32 reason)
{
	w->fp_step = 1;
	w->lr_known = 0;
	if (w->n == 1)
		w->leaf_fp = 1;
	// The outermost frame of code that keeps frame pointers (Go's
	// runtime.goexit, a thread's first JIT frame) saved a zero RBP.
	if (w->bp_known && w->bp == 0 && reason == UNWIND_STOP_NO_CFI)
		return stop(w, UNWIND_STOP_FP_END);
	if (!w->bp_known || w->bp + FP_BELOW_SP < w->sp || w->bp > MAX_USER_ADDR)
		return stop(w, reason);
	struct stack_words frame;
	if (stack_read(&frame, w->bp, 2, w->sampler))
		return stop(w, reason);
	w->sp = w->bp + 16;
	w->bp = frame.w[0];
	w->pc = RA_STRIP(frame.w[1]);
	w->exact_pc = 0;
	w->pc_by_cfi = 0;
	return 0;
}

#include "bpfcol_hotspot.h"

// unwind_frame records the frame at w->pc in s->user and steps w to its
// caller. It returns 1 once the walk stopped (w->stop says why), else 0.
__noinline long unwind_frame(struct walk_regs *w, struct sample *s, struct unwind_proc *proc)
{
	if (!w || !s || !proc)
		return 1;
	w->fp_step = 0;
	u64 pc = w->pc;
	// A uretprobe's trampoline in place of this return address: the
	// kernel kept the true one under the caller's SP.
	if (pc == w->tramp && pc && !w->exact_pc) {
		pc = uretprobe_return(URETPROBE_SLOT(w->sp));
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

	u8 cfa_rule = r->rules & 7, fp_rule = (r->rules >> 4) & 3, ra_rule = r->rules >> 6;
	u64 cfa;
	switch (cfa_rule) {
	case UNWIND_CFA_SP:
		cfa = w->sp + r->cfa_off;
		break;
	case UNWIND_CFA_FP:
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
		// The registers the handler returns with: the frame pointer,
		// SP, PC (and arm64's LR), read one by one into one buffer (6.1
		// allows 512 bytes of stack for a whole call chain).
		u64 uc = w->sp;
		if (stack_read(&words, uc + UC_FP, 1, w->sampler))
			return stop(w, UNWIND_STOP_READ_FAULT);
		w->bp = words.w[0];
		w->bp_known = 1;
		w->lr_known = 0;
		if (HAS_LINK_REGISTER) {
			if (stack_read(&words, uc + UC_LR, 1, w->sampler))
				return stop(w, UNWIND_STOP_READ_FAULT);
			w->lr = words.w[0];
			w->lr_known = 1;
		}
		if (stack_read(&words, uc + UC_SP, 1, w->sampler))
			return stop(w, UNWIND_STOP_READ_FAULT);
		w->sp = words.w[0];
		if (stack_read(&words, uc + UC_PC, 1, w->sampler))
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
	// Every frame's CFA lies above the frame below it, but an arm64
	// leaf's, which has not moved SP: its return address is in x30, which
	// only the interrupted frame follows, once.
	if (cfa < w->sp || (cfa == w->sp && ra_rule != UNWIND_RA_IN_LINK) || cfa > MAX_USER_ADDR)
		return stop(w, UNWIND_STOP_BAD_CFA);

	u64 ra;
	// Where the row's slots are counted from.
	u64 slots = (r->rules & UNWIND_SLOTS_AT_SP) ? w->sp : cfa;
	s64 fp_off = r->fp_off;
	if (fp_rule == UNWIND_FP_AT_CFA &&
	    ((ra_rule == UNWIND_RA_CALL_SLOT && fp_off == -2 && slots == cfa) || ra_rule == UNWIND_RA_ABOVE_FP)) {
		// The usual frame: a frame record, the saved frame pointer
		// right under the return address.
		if (stack_read(&words, slots + fp_off * 8, 2, w->sampler))
			return stop(w, UNWIND_STOP_READ_FAULT);
		w->bp = words.w[0];
		w->bp_known = 1;
		ra = words.w[1];
	} else {
		switch (ra_rule) {
		case UNWIND_RA_CALL_SLOT:
			if (stack_read(&words, cfa - 8, 1, w->sampler))
				return stop(w, UNWIND_STOP_READ_FAULT);
			ra = words.w[0];
			break;
		case UNWIND_RA_AT_OFF:
			// fp_off places the return address: the loader packs it
			// so only where the frame pointer is not restored from
			// the frame.
			if (stack_read(&words, slots + fp_off * 8, 1, w->sampler))
				return stop(w, UNWIND_STOP_READ_FAULT);
			ra = words.w[0];
			if (fp_rule == UNWIND_FP_AT_CFA)
				fp_rule = UNWIND_FP_UNSUPPORTED;
			break;
		case UNWIND_RA_IN_LINK:
			// Only the interrupted frame's (or a signal frame's) link
			// register is known.
			if (!w->lr_known)
				return stop(w, UNWIND_STOP_UNSUPPORTED);
			ra = w->lr;
			break;
		default:
			return stop(w, UNWIND_STOP_UNSUPPORTED);
		}
		switch (fp_rule) {
		case UNWIND_FP_UNCHANGED:
			break;
		case UNWIND_FP_AT_CFA:
			if (stack_read(&words, slots + fp_off * 8, 1, w->sampler))
				return stop(w, UNWIND_STOP_READ_FAULT);
			w->bp = words.w[0];
			w->bp_known = 1;
			break;
		default:
			w->bp_known = 0;
		}
	}
	w->lr_known = 0;
	w->sp = cfa;
	w->pc = RA_STRIP(ra);
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
			// arm64's link register, which fill_sample keeps in
			// leaf_words[0]: a frameless leaf's return address.
			.lr = HAS_LINK_REGISTER ? s->leaf_words[0] : 0,
			.lr_known = HAS_LINK_REGISTER && (s->flags & SAMPLE_LEAF_WORDS_VALID),
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

#endif /* BPFCOL_WALK_H */
