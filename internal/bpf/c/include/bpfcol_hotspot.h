/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * HotSpot (OpenJDK) frames. A JVM runs Java code in its code cache: the
 * template interpreter, the methods C1 and C2 compiled (nmethods), and
 * stubs. That code has no CFI, and compiled code uses RBP as a general
 * register, so the CFI walk hands every PC in the code cache to
 * hotspot_frame, which finds the frame's code blob and unwinds it the way
 * the JVM's own stack walker does:
 *
 * - the template interpreter keeps RBP as its frame pointer, the Method*
 *   and the bytecode pointer in fixed slots below it (and the bytecode
 *   pointer of the running frame in R13);
 * - a compiled frame's size is in its blob (CodeBlob::_frame_size, in
 *   words, the return address and saved RBP included): its caller's SP is
 *   the frame's SP plus that size;
 * - a blob is found from a PC through its code heap's segment map, one byte
 *   per segment: 0 at a blob's first segment, else how many segments to
 *   step back towards it (0xff: free).
 *
 * Every layout fact comes from the JVM itself (its vmStructs tables), read
 * by user space (internal/interp/hotspot) into the process's hs_proc.
 * Each HotSpot frame also becomes an interpreter frame of the record's
 * tail (bpfcol_interp.h), anchored at the native frame it is, carrying
 * what user space names it from: the nmethod or stub (a code blob) with
 * the PC's offset in its code, or the interpreted Method* with the
 * bytecode index. Code-cache and metaspace memory is reused once freed, so
 * the object's address carries, in its top 16 bits (never set in a user
 * address), an identity user space checks: the nmethod's compile id, the
 * Method's ConstMethod address.
 *
 * Include after profiler.bpf.c's walk (struct walk_regs, stop) and
 * bpfcol_interp.h.
 */
#ifndef BPFCOL_HOTSPOT_H
#define BPFCOL_HOTSPOT_H

/* Code heaps of a code cache: JDK 9+ splits it in three (non-nmethods,
 * profiled and non-profiled nmethods). */
#define HS_MAX_HEAPS 4

/* Bytes read of a code block: its HeapBlock header, then the blob's
 * fields up to the furthest one the walk reads (an nmethod's compile id). */
#define HS_BLOCK_BYTES 512

/* Segment map steps to a blob's first segment. Since JDK 13 a segment's
 * byte steps back up to 254 segments: 16 steps reach the start of any
 * blob under 4000 segments (500 KiB at 128-byte segments). */
#define HS_SEGMAP_STEPS 16

/* Interpreter frame slots read, in words below the frame pointer (the
 * slots from -1 down to -HS_FP_SLOTS), plus the saved RBP and the return
 * address at and above it. */
#define HS_FP_SLOTS 14

/* How far above the stack pointer an interpreter's frame pointer may be:
 * its locals, monitors and expression stack. */
#define HS_MAX_FRAME_BYTES (1 << 20)

struct hs_heap {
	u64 low, high; /* the heap's code memory, reserved: [low, high) */
	u64 segmap;    /* its segment map: one byte per segment from low */
};

/* What the walk needs of one JVM. Offsets are of fields of a code blob
 * (from its start), of a Method and ConstMethod, in bytes; slots of an
 * interpreter frame, in words from its frame pointer. */
struct hs_proc {
	u64 cache_low, cache_high;   /* the code cache: every code blob lies in it */
	u64 interp_low, interp_high; /* the template interpreter's code */
	struct hs_heap heaps[HS_MAX_HEAPS];
	u32 heap_count;
	u16 block_header;    /* sizeof(HeapBlock): the blob follows it */
	u16 block_used;      /* offset of HeapBlock::Header::_used (a bool) */
	u16 block_bytes;     /* bytes read from the block's start: every field below lies within */
	u16 blob_name;       /* CodeBlob::_name (const char*) */
	u16 blob_frame_complete; /* CodeBlob::_frame_complete_offset (int): the frame is built from code_begin + this */
	u16 blob_frame_size; /* CodeBlob::_frame_size (int, words) */
	u16 blob_code_begin; /* CodeBlob::_code_begin (address) */
	u16 nm_compile_id;   /* nmethod::_compile_id (int) */
	u16 nm_orig_pc;      /* nmethod::_orig_pc_offset (int): where a deoptimized frame keeps its PC, from its SP */
	u16 nm_deopt_handler; /* CompiledMethod::_deopt_handler_begin (address) */
	u16 method_const;    /* Method::_constMethod */
	u16 const_bytes;     /* sizeof(ConstMethod): the bytecodes follow it */
	signed char fp_method;        /* frame::interpreter_frame_method_offset (negative) */
	signed char fp_bcp;           /* frame::interpreter_frame_bcp_offset */
	signed char fp_sender_sp;     /* frame::interpreter_frame_sender_sp_offset */
	u8 segment_shift;    /* log2 of the code heaps' segment size */
};

/* Set by the loader when HotSpot frames are wanted: otherwise no sample
 * pays the lookup in interp_procs. */
const volatile bool hotspot_frames = false;

/* A code block's bytes, read per CPU (too large for the BPF stack). */
struct hs_block {
	u8 b[HS_BLOCK_BYTES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct hs_block);
} hs_scratch SEC(".maps");

/* What a HotSpot walk carries besides the registers: the leaf's R13 (the
 * interpreter's bytecode pointer while a bytecode runs) and how the walk
 * went. */
struct hs_walk {
	u64 bcp;
	u32 stop; /* enum interp_stop: END, or why a HotSpot frame ended the walk */
	u32 pad;
};

const struct hs_proc *unused_hs_proc __attribute__((unused));

/* The first 8 bytes of the names of the blobs of compiled methods. */
#define HS_NAME_NMETHOD 0x00646f6874656d6eULL /* "nmethod\0" */
#define HS_NAME_NATIVE 0x6e2065766974616eULL  /* "native n" */

/* hotspot_pc says whether pc lies in the JVM's code cache. */
static __always_inline bool hotspot_pc(struct hs_proc *hs, u64 pc)
{
	return pc >= hs->cache_low && pc < hs->cache_high;
}

/* hs_block_of returns the start of the code block (its HeapBlock header)
 * holding pc, 0 if none. */
static __always_inline u64 hs_block_of(struct hs_proc *hs, u64 pc)
{
	struct hs_heap *h = 0;
	for (int i = 0; i < HS_MAX_HEAPS; i++) {
		if (i < hs->heap_count && pc >= hs->heaps[i].low && pc < hs->heaps[i].high)
			h = &hs->heaps[i];
	}
	if (!h)
		return 0;
	u32 shift = hs->segment_shift & 31;
	u64 seg = (pc - h->low) >> shift;
	for (int i = 0; i < HS_SEGMAP_STEPS; i++) {
		u8 tag;
		if (bpf_probe_read_user(&tag, 1, (void *)(h->segmap + seg)))
			return 0;
		if (tag == 0)
			return h->low + (seg << shift);
		if (tag == 0xff || tag > seg)
			return 0;
		seg -= tag;
	}
	return 0;
}

static __always_inline u64 hs_u64(u8 *b, u16 off)
{
	u64 v;
	__builtin_memcpy(&v, b + (off & (HS_BLOCK_BYTES - 8)), sizeof(v));
	return v;
}

static __always_inline u32 hs_u32(u8 *b, u16 off)
{
	u32 v;
	__builtin_memcpy(&v, b + (off & (HS_BLOCK_BYTES - 4)), sizeof(v));
	return v;
}

/* hs_ret_in_cache unwinds a frame whose return address is at sp, or at
 * sp + 8 under a saved RBP: a compiled frame in its prologue or epilogue.
 * Its caller runs in the code cache (an nmethod is only called from it),
 * which picks the word. */
static __always_inline bool hs_ret_in_cache(struct walk_regs *w, struct hs_proc *hs)
{
	u64 words[2];
	if (bpf_probe_read_user(words, sizeof(words), (void *)w->sp))
		return false;
	if (hotspot_pc(hs, words[0])) {
		w->pc = words[0];
		w->sp += 8;
		return true;
	}
	if (hotspot_pc(hs, words[1])) {
		w->bp = words[0];
		w->bp_known = 1;
		w->pc = words[1];
		w->sp += 16;
		return true;
	}
	return false;
}

/* hs_step_sized unwinds a frame of known size: the caller's SP is sp +
 * size, the return address and saved RBP right under it. */
static __always_inline bool hs_step_sized(struct walk_regs *w, u64 size)
{
	u64 caller_sp = w->sp + size;
	u64 pair[2];
	if (bpf_probe_read_user(pair, sizeof(pair), (void *)(caller_sp - 16)))
		return false;
	w->bp = pair[0];
	w->bp_known = 1;
	w->pc = pair[1];
	w->sp = caller_sp;
	return true;
}

/* hs_step_fp unwinds a frame by its frame pointer (the call stub, and
 * the stubs that build a frame with enter()). */
static __always_inline bool hs_step_fp(struct walk_regs *w)
{
	if (!w->bp_known || w->bp < w->sp || w->bp - w->sp > HS_MAX_FRAME_BYTES)
		return false;
	u64 pair[2];
	if (bpf_probe_read_user(pair, sizeof(pair), (void *)w->bp))
		return false;
	w->sp = w->bp + 16;
	w->bp = pair[0];
	w->pc = pair[1];
	return true;
}

/* hs_interpreted names and unwinds a frame of the template interpreter.
 * It returns the interp_stop reason, END on success. */
static __always_inline u32 hs_interpreted(struct walk_regs *w, struct hs_proc *hs, struct hs_walk *x,
					  struct interp_frame *f, bool leaf)
{
	u64 fp = w->bp;
	if (!w->bp_known || fp < w->sp || fp - w->sp > HS_MAX_FRAME_BYTES)
		return INTERP_STOP_BAD_FRAME;
	/* The slots go in the per-CPU block, not on the stack: under the
	 * off-CPU walk's task work the calls' stacks come near 512 bytes. */
	u32 zero = 0;
	struct hs_block *buf = bpf_map_lookup_elem(&hs_scratch, &zero);
	if (!buf)
		return INTERP_STOP_READ_FAULT;
	u64 *slots = (u64 *)buf->b;
	if (bpf_probe_read_user(slots, (HS_FP_SLOTS + 2) * 8, (void *)(fp - HS_FP_SLOTS * 8)))
		return INTERP_STOP_READ_FAULT;
	/* slots[HS_FP_SLOTS + k] is the word at fp + 8k. */
	u64 method = slots[(HS_FP_SLOTS + hs->fp_method) & (HS_FP_SLOTS + 1)];
	u64 bcp = slots[(HS_FP_SLOTS + hs->fp_bcp) & (HS_FP_SLOTS + 1)];
	u64 sender_sp = slots[(HS_FP_SLOTS + hs->fp_sender_sp) & (HS_FP_SLOTS + 1)];
	u64 cm;
	if (!user_addr(method) || bpf_probe_read_user(&cm, sizeof(cm), (void *)(method + hs->method_const)))
		return INTERP_STOP_READ_FAULT;
	u64 code = cm + hs->const_bytes;
	/* The running frame keeps its bytecode pointer in R13; the frame's
	 * slot holds it only across calls. */
	if (leaf && x->bcp - code < 0x10000)
		bcp = x->bcp;
	f->object = method | (((cm >> 3) & 0xffff) << 48);
	if (bcp - code < 0x10000)
		f->offset = bcp - code;
	else
		f->flags |= INTERP_FRAME_NO_OFFSET;
	/* The caller: its PC and RBP above the frame pointer, its SP (the
	 * one a compiled caller's frame size counts from) in the frame. */
	if (sender_sp <= w->sp)
		sender_sp = fp + 16;
	w->bp = slots[HS_FP_SLOTS];
	w->pc = slots[HS_FP_SLOTS + 1];
	w->sp = sender_sp;
	return INTERP_STOP_END;
}

/* hs_compiled names and unwinds a frame of a code blob: an nmethod, or a
 * stub. It returns the interp_stop reason, END on success. */
static __always_inline u32 hs_compiled(struct walk_regs *w, struct hs_proc *hs, struct interp_frame *f, bool exact)
{
	u64 block = hs_block_of(hs, w->pc);
	if (!block)
		return INTERP_STOP_NO_CODE_BLOB;
	u32 zero = 0;
	struct hs_block *buf = bpf_map_lookup_elem(&hs_scratch, &zero);
	if (!buf)
		return INTERP_STOP_READ_FAULT;
	u32 size = hs->block_bytes;
	if (size < 16 || size > HS_BLOCK_BYTES)
		return INTERP_STOP_BAD_LAYOUT;
	if (bpf_probe_read_user(buf->b, size, (void *)block))
		return INTERP_STOP_READ_FAULT;
	u8 *b = buf->b;
	if (!b[hs->block_used & (HS_BLOCK_BYTES - 1)])
		return INTERP_STOP_NO_CODE_BLOB; /* freed */
	u64 blob = block + hs->block_header;
	u16 at = hs->block_header;
	u64 code = hs_u64(b, at + hs->blob_code_begin);
	u64 frame_size = (u64)hs_u32(b, at + hs->blob_frame_size) * 8;
	s32 complete = hs_u32(b, at + hs->blob_frame_complete);
	u64 name = 0;
	bpf_probe_read_user(&name, sizeof(name), (void *)hs_u64(b, at + hs->blob_name));

	u64 pc = w->pc;
	f->object = blob;
	if (name == HS_NAME_NMETHOD || name == HS_NAME_NATIVE) {
		u64 compile_id = hs_u32(b, at + hs->nm_compile_id);
		f->object |= (compile_id & 0xffff) << 48;
		/* A frame deoptimized while it was not running returns to the
		 * deopt handler; its own PC waits in the frame. */
		if (!exact && pc == hs_u64(b, at + hs->nm_deopt_handler)) {
			s32 off = hs_u32(b, at + hs->nm_orig_pc);
			u64 orig;
			if (off > 0 && off < (s32)frame_size &&
			    bpf_probe_read_user(&orig, sizeof(orig), (void *)(w->sp + off)) == 0 && hotspot_pc(hs, orig))
				pc = orig;
		}
	}
	/* The offset of the instruction that runs: a return address's call
	 * ends right before it. */
	u64 off = pc - code - (exact ? 0 : 1);
	if (pc > code && off < 0x10000000)
		f->offset = off;
	else
		f->flags |= INTERP_FRAME_NO_OFFSET;

	if (frame_size == 0) {
		/* A stub with no frame of its own in the blob (the call stub,
		 * adapters, StubRoutines): one built with enter() below its
		 * frame pointer; a running frameless one has only its return
		 * address, at sp. */
		if (exact && hs_ret_in_cache(w, hs))
			return INTERP_STOP_END;
		return hs_step_fp(w) ? INTERP_STOP_END : INTERP_STOP_BAD_FRAME;
	}
	if (frame_size > HS_MAX_FRAME_BYTES)
		return INTERP_STOP_BAD_LAYOUT;
	/* A running frame may still be building itself (prologue) or be
	 * taking itself down (epilogue): its return address is then at sp or
	 * right above, not under its full size. */
	if (exact && complete > 0 && pc < code + complete)
		return hs_ret_in_cache(w, hs) ? INTERP_STOP_END : INTERP_STOP_BAD_FRAME;
	struct walk_regs before = *w;
	if (!hs_step_sized(w, frame_size))
		return INTERP_STOP_READ_FAULT;
	if (exact && !hotspot_pc(hs, w->pc)) {
		*w = before;
		if (hs_ret_in_cache(w, hs))
			return INTERP_STOP_END;
		*w = before;
		if (!hs_step_sized(w, frame_size))
			return INTERP_STOP_READ_FAULT;
	}
	return INTERP_STOP_END;
}

/* hotspot_frame records the frame at w->pc, which lies in the code cache,
 * in r (user[] and the interpreter tail) and steps w to its caller. It
 * returns 1 once the walk stopped. */
__noinline long hotspot_frame(struct walk_regs *w, struct sample_interp *r, struct hs_proc *hs, struct hs_walk *x)
{
	if (!w || !r || !hs || !x)
		return 1;
	u32 n = w->n;
	if (n >= MAX_STACK_DEPTH)
		return stop(w, UNWIND_STOP_DEPTH_LIMIT);
	u32 i = r->interp_frames;
	if (i >= INTERP_MAX_FRAMES)
		return stop(w, UNWIND_STOP_DEPTH_LIMIT);
	u64 pc = w->pc;
	bool exact = w->exact_pc;
	r->s.user[n & (MAX_STACK_DEPTH - 1)] = pc | (exact && n > 0 ? FRAME_PC_EXACT : 0);
	w->n = n + 1;
	struct interp_frame *f = &r->frames[i & (INTERP_MAX_FRAMES - 1)];
	f->object = 0;
	f->offset = 0;
	f->anchor = n;
	f->kind = INTERP_FRAME_HOTSPOT;
	f->flags = INTERP_FRAME_AT_NATIVE;
	u64 sp = w->sp;
	u32 reason;
	if (pc >= hs->interp_low && pc < hs->interp_high)
		reason = hs_interpreted(w, hs, x, f, n == 0);
	else
		reason = hs_compiled(w, hs, f, exact);
	if (f->object)
		r->interp_frames = i + 1;
	if (reason == INTERP_STOP_END && (w->sp <= sp || w->pc == 0)) {
		/* Every caller's frame lies above its callee's. */
		reason = INTERP_STOP_BAD_FRAME;
	}
	w->exact_pc = 0;
	if (reason != INTERP_STOP_END) {
		x->stop = reason;
		return stop(w, UNWIND_STOP_UNSUPPORTED);
	}
	return 0;
}

#endif /* BPFCOL_HOTSPOT_H */
