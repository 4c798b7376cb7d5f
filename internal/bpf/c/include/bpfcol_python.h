/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * CPython frames: for a process that runs CPython, the sampler finds the
 * sampled thread's thread state, then walks its frames from the innermost
 * one, one per bpf_loop iteration, into a record's interpreter tail
 * (bpfcol_interp.h). Everything version-specific comes from the process's
 * py_proc, which user space (internal/interp/python) writes when it learns
 * that a process runs CPython and deletes when it exits: the walk itself
 * knows no version.
 *
 * Include after bpfcol_interp.h and the counter enum.
 */
#ifndef BPFCOL_PYTHON_H
#define BPFCOL_PYTHON_H

/* How the thread state of a thread is found. */
enum py_tstate_via {
	/* Through the thread's pthread-specific data: the key is in the
	 * process (autoTSSkey); the data of the thread's key, found the way
	 * libc's pthread_getspecific finds it, is the thread state
	 * (CPython 3.6-3.12). */
	PY_TSTATE_TSD = 1,
	/* A thread-local of a shared library (_Py_tss_tstate, 3.13+): the
	 * library's TLS block is found in the thread's dynamic thread vector.
	 * Unset, the pthread-specific one (tss_key, when not 0) is read. */
	PY_TSTATE_TLS_DTV = 2,
	/* A thread-local at a fixed offset from the thread pointer (a static
	 * build, or initial-exec TLS); the same fallback. */
	PY_TSTATE_TLS_TP = 3,
};

/* How frames are linked, and which frames a loop call runs. */
enum py_frame_layout {
	/* PyFrameObject (3.6-3.10): each frame is run by its own loop call;
	 * f_lasti is an int. */
	PY_FRAMES_OBJECTS = 1,
	/* _PyInterpreterFrame with is_entry (3.11): a loop call's first
	 * frame, the last one it runs walking outward, is flagged. */
	PY_FRAMES_IS_ENTRY = 2,
	/* _PyInterpreterFrame whose loop calls each start with a frame on
	 * the C stack (3.12+), owned by shim_owner: not a Python frame, the
	 * boundary between two loop calls. */
	PY_FRAMES_SHIM = 3,
};

/* A frame is read whole into a buffer of this many bytes: every offset
 * below is checked by user space to lie within it. */
#define PY_FRAME_BYTES_MAX 128

/* Offset marking a field a version lacks. */
#define PY_NO_OFFSET 0xffff

/*
 * The thread-specific data of key k (TSD), as libc's pthread_getspecific
 * reads it: keys below 1 << tsd_block_shift at base + tsd_first +
 * k * tsd_entry + tsd_data, base being the thread pointer, or the pointer
 * at tsd_self from it; the others in a second-level block, whose pointer
 * is at the thread pointer + tsd_second + (k >> tsd_block_shift) * 8, at
 * (k's low bits) * tsd_entry + tsd_data in it.
 */
struct py_proc {
	u64 tss_key;    /* TSD (and the fallback of TLS when not 0): address of the pthread key */
	u64 dtv_entry;  /* TLS_DTV: offset in the DTV of the entry of the library holding the thread state */
	s64 tls_offset; /* TLS_DTV: offset in its TLS block; TLS_TP: offset from the thread pointer */
	u16 tsd_self;   /* TSD: PY_NO_OFFSET, or the thread pointer offset of the pointer tsd_first is from */
	u16 tsd_first;  /* TSD: offset of key 0's entry in the first block */
	u16 tsd_second; /* TSD: thread pointer offset of the array of second-level blocks */
	u16 dtv_offset; /* TLS_DTV: thread pointer offset of the DTV pointer */
	u8 tsd_entry;   /* TSD: bytes per key entry */
	u8 tsd_data;    /* TSD: offset of the data pointer in an entry */
	u8 tsd_block_shift; /* TSD: log2 of the keys per block */
	u8 tstate_via;      /* enum py_tstate_via */
	u8 tss_initialized; /* TSD: the key follows a Py_tss_t's _is_initialized, which must be 1 */
	u8 pad0;
	u16 tstate_frame;   /* offset of the current frame (or of the _PyCFrame pointer) in the thread state */
	u16 cframe_frame;   /* PY_NO_OFFSET, or the offset of current_frame in _PyCFrame (3.11, 3.12) */
	u16 frame_previous; /* offset of the outer frame's pointer */
	u16 frame_code;     /* offset of the code object's pointer */
	u16 frame_instr;    /* offset of f_lasti (an int), or of the instruction pointer */
	u16 frame_entry;    /* offset of is_entry or owner (a byte) */
	u16 frame_bytes;    /* bytes read per frame, at most PY_FRAME_BYTES_MAX */
	u16 code_insns;     /* offset of the first instruction in a code object (instruction pointers) */
	u8 frame_layout;    /* enum py_frame_layout */
	u8 shim_owner;      /* PY_FRAMES_SHIM: owner value of a loop call's C-stack frame */
	u8 lasti_scale;     /* PY_FRAMES_OBJECTS: bytes per f_lasti unit */
	u8 pad;
};

/* Set by the loader when CPython frames are wanted: otherwise no sample
 * pays the lookup in interp_procs. */
const volatile bool python_frames = false;

const struct py_proc *unused_py_proc __attribute__((unused));
const enum py_tstate_via *unused_py_tstate_via __attribute__((unused));
const enum py_frame_layout *unused_py_frame_layout __attribute__((unused));

/* The kernel field the thread pointer is read from: bpfcol_arch.h. */
struct task_struct___py {
	struct thread_struct thread;
} __attribute__((preserve_access_index));

static __always_inline bool user_addr(u64 a)
{
	return a != 0 && a <= 0x00007fffffffffffULL;
}

/* py_tsd finds the thread state in the thread's pthread-specific data:
 * the address of its key's data, 0 with *stop set when it has none. */
static __always_inline u64 py_tsd(struct py_proc *p, u64 tp, u32 *stop)
{
	u32 key[2] = {};
	if (p->tss_initialized) {
		// The Py_tss_t: its _is_initialized, then the key.
		if (bpf_probe_read_user(key, sizeof(key), (void *)(p->tss_key - 4)))
			return 0;
		if (key[0] != 1) {
			*stop = INTERP_STOP_NO_THREAD_STATE;
			return 0;
		}
		key[0] = key[1];
	} else if (bpf_probe_read_user(key, sizeof(key[0]), (void *)p->tss_key)) {
		return 0;
	}
	u32 k = key[0];
	u32 shift = p->tsd_block_shift & 15;
	u32 block = 1U << shift;
	if (k < block) {
		u64 base = tp;
		if (p->tsd_self != PY_NO_OFFSET && bpf_probe_read_user(&base, sizeof(base), (void *)(tp + p->tsd_self)))
			return 0;
		return base + p->tsd_first + (u64)k * p->tsd_entry + p->tsd_data;
	}
	// glibc's PTHREAD_KEYS_MAX is 1024.
	if (k >= 1024)
		return 0;
	u64 second;
	if (bpf_probe_read_user(&second, sizeof(second), (void *)(tp + p->tsd_second + (u64)(k >> shift) * 8)))
		return 0;
	if (!second) {
		*stop = INTERP_STOP_NO_THREAD_STATE;
		return 0;
	}
	return second + (u64)(k & (block - 1)) * p->tsd_entry + p->tsd_data;
}

/* py_tls finds the thread state's thread-local: its address, 0 with
 * *stop set when the thread has none. */
static __always_inline u64 py_tls(struct py_proc *p, u64 tp, u32 *stop)
{
	if (p->tstate_via == PY_TSTATE_TLS_TP)
		return tp + p->tls_offset;
	u64 dtv, tlsblock;
	if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(tp + p->dtv_offset)) || !user_addr(dtv))
		return 0;
	if (bpf_probe_read_user(&tlsblock, sizeof(tlsblock), (void *)(dtv + p->dtv_entry)))
		return 0;
	// Not allocated for this thread yet (glibc's TLS_DTV_UNALLOCATED is
	// -1): the thread never ran the library's code.
	if (!user_addr(tlsblock)) {
		*stop = INTERP_STOP_NO_THREAD_STATE;
		return 0;
	}
	return tlsblock + p->tls_offset;
}

/* py_thread_state finds task's thread state: 0 with *stop set when there
 * is none or it cannot be read. A thread-local thread state (3.13+) is
 * the one attached to the thread, unset while the thread runs without
 * the GIL (blocked, or in C code that released it): the thread's
 * pthread-specific one, when the process has its key, stands in then. */
static __always_inline u64 py_thread_state(struct py_proc *p, struct task_struct *task, u32 *stop)
{
	u64 tp = THREAD_POINTER(((struct task_struct___py *)task)->thread);
	u64 addr = 0, ts = 0;
	*stop = INTERP_STOP_TLS_FAULT;
	if (!user_addr(tp))
		return 0;
	switch (p->tstate_via) {
	case PY_TSTATE_TSD:
		addr = py_tsd(p, tp, stop);
		break;
	case PY_TSTATE_TLS_DTV:
	case PY_TSTATE_TLS_TP:
		addr = py_tls(p, tp, stop);
		if (addr && p->tss_key && bpf_probe_read_user(&ts, sizeof(ts), (void *)addr) == 0 && ts == 0)
			addr = py_tsd(p, tp, stop);
		break;
	default:
		*stop = INTERP_STOP_BAD_LAYOUT;
		return 0;
	}
	if (!addr)
		return 0;
	if (bpf_probe_read_user(&ts, sizeof(ts), (void *)addr))
		return 0;
	if (!ts) {
		*stop = INTERP_STOP_NO_THREAD_STATE;
		return 0;
	}
	*stop = INTERP_STOP_END;
	return ts;
}

/* py_current_frame returns the innermost frame of thread state ts, 0 when
 * the thread runs none, with *stop set when it cannot be read. */
static __always_inline u64 py_current_frame(struct py_proc *p, u64 ts, u32 *stop)
{
	u64 f;
	if (bpf_probe_read_user(&f, sizeof(f), (void *)(ts + p->tstate_frame))) {
		*stop = INTERP_STOP_READ_FAULT;
		return 0;
	}
	if (p->cframe_frame != PY_NO_OFFSET && f) {
		if (bpf_probe_read_user(&f, sizeof(f), (void *)(f + p->cframe_frame))) {
			*stop = INTERP_STOP_READ_FAULT;
			return 0;
		}
	}
	return f;
}

/* The state of one frame walk, which py_frame, a global function, reads
 * and writes: the bpf_loop callback's state is the same at every
 * iteration. */
struct py_walk {
	u64 frame;  /* the next frame to read; 0: no more */
	u32 n;      /* frames written */
	u32 stop;   /* enum interp_stop, once stopped */
	u16 anchor; /* ordinal of the loop call the next frame is run by */
	u8 stopped;
	u8 pad[5];
};

struct py_loop {
	struct sample_interp *r;
	struct py_proc *p;
	struct py_walk w;
};

static __always_inline long py_stop(struct py_walk *w, u32 reason)
{
	w->stop = reason;
	w->stopped = 1;
	return 1;
}

static __always_inline u64 frame_u64(u8 *buf, u16 off)
{
	u64 v;
	__builtin_memcpy(&v, buf + (off & (PY_FRAME_BYTES_MAX - 8)), sizeof(v));
	return v;
}

/* py_frame writes the frame at w->frame into r and moves w to its outer
 * frame. It returns 1 once the walk stopped. */
__noinline long py_frame(struct py_walk *w, struct sample_interp *r, struct py_proc *p)
{
	if (!w || !r || !p)
		return 1;
	u64 f = w->frame;
	if (!f)
		return py_stop(w, INTERP_STOP_END);
	if (!user_addr(f))
		return py_stop(w, INTERP_STOP_READ_FAULT);
	u32 n = w->n;
	if (n >= INTERP_MAX_FRAMES) {
		struct interp_frame *m = &r->frames[INTERP_MAX_FRAMES];
		m->object = 0;
		m->offset = 0;
		m->anchor = w->anchor;
		m->kind = INTERP_FRAME_TRUNCATED;
		m->flags = 0;
		w->n = n + 1;
		return py_stop(w, INTERP_STOP_TRUNCATED);
	}
	u32 size = p->frame_bytes;
	if (size < 16 || size > PY_FRAME_BYTES_MAX)
		return py_stop(w, INTERP_STOP_BAD_LAYOUT);
	u8 buf[PY_FRAME_BYTES_MAX] = {};
	if (bpf_probe_read_user(buf, size, (void *)f))
		return py_stop(w, INTERP_STOP_READ_FAULT);
	u64 code = frame_u64(buf, p->frame_code);
	u64 prev = frame_u64(buf, p->frame_previous);
	u8 entry = buf[p->frame_entry & (PY_FRAME_BYTES_MAX - 1)];
	u8 layout = p->frame_layout;
	w->frame = prev;
	if (layout == PY_FRAMES_SHIM && entry == p->shim_owner) {
		// A loop call's own frame on the C stack: the frames further
		// out are run by the next loop call.
		w->anchor++;
		return 0;
	}

	u32 offset = 0;
	u8 flags = 0;
	if (layout == PY_FRAMES_OBJECTS) {
		s32 lasti;
		__builtin_memcpy(&lasti, buf + (p->frame_instr & (PY_FRAME_BYTES_MAX - 4)), sizeof(lasti));
		// Below 0: the frame has not started; its first line.
		if (lasti > 0)
			offset = (u32)lasti * (p->lasti_scale & 3);
	} else {
		u64 instr = frame_u64(buf, p->frame_instr);
		s64 off = (s64)(instr - code - p->code_insns);
		// Before the first instruction: a frame that has not started.
		if (off > (1LL << 28))
			flags |= INTERP_FRAME_NO_OFFSET;
		else if (off > 0)
			offset = (u32)off;
	}
	struct interp_frame *out = &r->frames[n & (INTERP_MAX_FRAMES - 1)];
	out->object = code;
	out->offset = offset;
	out->anchor = w->anchor;
	out->kind = INTERP_FRAME_CPYTHON;
	out->flags = flags;
	w->n = n + 1;
	// Before 3.11 each frame has a loop call of its own; in 3.11 a loop
	// call's first frame is flagged.
	if (layout == PY_FRAMES_OBJECTS || (layout == PY_FRAMES_IS_ENTRY && entry))
		w->anchor++;
	return 0;
}

static long py_step(u64 i, struct py_loop *l)
{
	return py_frame(&l->w, l->r, l->p) ? 1 : 0;
}

/* Loop iterations of a walk: every frame up to the limit and the marker,
 * and the C-stack frames between them. */
#define PY_WALK_STEPS (2 * INTERP_MAX_FRAMES)

/* walk_python fills r's interpreter tail with the current thread's
 * CPython frames. */
static __always_inline void walk_python(struct sample_interp *r, struct py_proc *p, struct task_struct *task)
{
	r->interp_frames = 0;
	u32 stop;
	u64 ts = py_thread_state(p, task, &stop);
	if (!ts) {
		r->interp_stop = stop;
		count(COUNTER_INTERP_STOP + stop);
		return;
	}
	stop = INTERP_STOP_END;
	struct py_loop l = { .r = r, .p = p };
	l.w.frame = py_current_frame(p, ts, &stop);
	if (l.w.frame)
		bpf_loop(PY_WALK_STEPS, py_step, &l, 0);
	else
		l.w.stop = stop, l.w.stopped = 1;
	if (!l.w.stopped) {
		// Out of steps: more C-stack frames than frames. Cut, marked.
		u32 n = l.w.n;
		struct interp_frame *m = &r->frames[INTERP_MAX_FRAMES];
		if (n < INTERP_MAX_FRAMES)
			m = &r->frames[n & (INTERP_MAX_FRAMES - 1)];
		else
			n = INTERP_MAX_FRAMES;
		m->object = 0;
		m->offset = 0;
		m->anchor = l.w.anchor;
		m->kind = INTERP_FRAME_TRUNCATED;
		m->flags = 0;
		l.w.n = n + 1;
		l.w.stop = INTERP_STOP_TRUNCATED;
	}
	r->interp_frames = l.w.n;
	r->interp_stop = l.w.stop;
	count(COUNTER_INTERP_STOP + (l.w.stop < INTERP_STOP_MAX ? l.w.stop : INTERP_STOP_BAD_LAYOUT));
}

#endif /* BPFCOL_PYTHON_H */
