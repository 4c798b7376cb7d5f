/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * V8 (node) frames. V8's machine code (its JIT code, and the builtins
 * embedded in the binary) has no CFI but always keeps frame pointers, so
 * the native walk steps through it by frame pointer. For a process that
 * runs V8, each frame stepped that way is read as a V8 frame too: below
 * its frame pointer a JavaScript frame holds its context and its
 * JSFunction, an interpreted frame also its BytecodeArray and bytecode
 * offset; a typed frame (entry, exit, construct, stub) holds a frame-type
 * marker, a Smi, where a JavaScript frame has its context.
 *
 * Each JavaScript frame goes into the record's interpreter tail
 * (bpfcol_interp.h) as its SharedFunctionInfo, with its bytecode offset
 * when the frame is interpreted, anchored at the native frame it is. The
 * walk reads two or three words per frame and checks only their tags:
 * user space checks the objects' types, and which code the native frame
 * is in, before it names a frame. The offsets come from V8's own
 * post-mortem data (v8dbg_*), per process (internal/interp/v8).
 *
 * Include after bpfcol_interp.h and the counter enum.
 */
#ifndef BPFCOL_V8_H
#define BPFCOL_V8_H

/* Bytes read below a frame pointer: every frame slot user space gives is
 * within them. */
#define V8_FRAME_SLOTS_BYTES 64

/* Where V8 keeps what the walk reads, for one process: bytes below the
 * frame pointer (multiples of 8, at most V8_FRAME_SLOTS_BYTES), and field
 * offsets in heap objects. */
struct v8_proc {
	u8 fp_context;         /* the context, or a typed frame's marker */
	u8 fp_function;        /* the JSFunction */
	u8 fp_bytecode_array;  /* an interpreted frame's BytecodeArray */
	u8 fp_bytecode_offset; /* its bytecode offset, a Smi */
	u8 function_shared;    /* the SharedFunctionInfo in a JSFunction */
	u8 shared_function_data; /* the function data (its BytecodeArray) in a SharedFunctionInfo */
	u8 pad[2];
};

/* Set by the loader when V8 frames are wanted: otherwise no sample pays
 * the lookup in interp_procs. */
const volatile bool v8_frames = false;

const struct v8_proc *unused_v8_proc __attribute__((unused));

/* The frame a V8 walk step reads: its frame pointer and its index in the
 * record's user[]. */
struct v8_walk {
	u64 fp;
	u32 n;
	u32 pad;
};

/* V8's pointer tagging on 64-bit builds without pointer compression (user
 * space refuses others): a heap object pointer ends in 01, a Smi in 0, its
 * value in the upper 32 bits. */
static __always_inline bool v8_heap_object(u64 v)
{
	return (v & 3) == 1 && v <= 0x00007fffffffffffULL;
}

static __always_inline bool v8_smi(u64 v)
{
	return (v & 1) == 0;
}

/* v8_slot returns the word off bytes below the frame pointer from slots,
 * the V8_FRAME_SLOTS_BYTES read below it. */
static __always_inline u64 v8_slot(u64 *slots, u8 off)
{
	return slots[((u32)(V8_FRAME_SLOTS_BYTES - off) >> 3) & (V8_FRAME_SLOTS_BYTES / 8 - 1)];
}

static __always_inline long v8_result(enum jit_frame_result res)
{
	count(COUNTER_JIT_FRAME + res);
	return 0;
}

/* v8_frame reads the frame at v->fp, the native frame v->n of r, and
 * records it in r's tail when it is a JavaScript frame. A global
 * function: the verifier checks it once. */
__noinline long v8_frame(struct v8_walk *v, struct sample_interp *r, struct v8_proc *p)
{
	if (!v || !r || !p)
		return 0;
	u64 fp = v->fp;
	if (fp < V8_FRAME_SLOTS_BYTES || fp > 0x00007fffffffffffULL)
		return v8_result(JIT_FRAME_NOT_JIT);
	u64 slots[V8_FRAME_SLOTS_BYTES / 8];
	if (bpf_probe_read_user(slots, sizeof(slots), (void *)(fp - V8_FRAME_SLOTS_BYTES)))
		return v8_result(JIT_FRAME_READ_FAULT);
	u64 context = v8_slot(slots, p->fp_context);
	if (v8_smi(context))
		return v8_result(JIT_FRAME_TYPED);
	u64 function = v8_slot(slots, p->fp_function);
	if (!v8_heap_object(context) || !v8_heap_object(function))
		return v8_result(JIT_FRAME_NOT_JIT);
	u64 shared;
	if (bpf_probe_read_user(&shared, sizeof(shared), (void *)(function - 1 + p->function_shared)))
		return v8_result(JIT_FRAME_READ_FAULT);
	if (!v8_heap_object(shared))
		return v8_result(JIT_FRAME_NOT_JIT);
	u32 n = r->interp_frames;
	if (n >= INTERP_MAX_FRAMES)
		return 0;

	// An interpreted frame's bytecode offset counts only when its
	// BytecodeArray slot holds the function's own bytecode: in a
	// compiled frame the two slots hold other values.
	u32 offset = 0;
	u8 flags = INTERP_FRAME_AT_NATIVE | INTERP_FRAME_NO_OFFSET;
	u64 array = v8_slot(slots, p->fp_bytecode_array);
	u64 off = v8_slot(slots, p->fp_bytecode_offset);
	if (v8_heap_object(array) && v8_smi(off)) {
		u64 data;
		if (bpf_probe_read_user(&data, sizeof(data), (void *)(shared - 1 + p->shared_function_data)) == 0 &&
		    data == array) {
			offset = (u32)(off >> 32);
			flags = INTERP_FRAME_AT_NATIVE;
		}
	}
	struct interp_frame *out = &r->frames[n & (INTERP_MAX_FRAMES - 1)];
	out->object = shared;
	out->offset = offset;
	out->anchor = v->n;
	out->kind = INTERP_FRAME_V8;
	out->flags = flags;
	r->interp_frames = n + 1;
	return v8_result(JIT_FRAME_RECORDED);
}

#endif /* BPFCOL_V8_H */
