/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Interpreter frames in a sample record, for every interpreter the sampler
 * walks (CPython first). Native frames stay in the record's user[]; the
 * frames of an interpreter travel in a tail after it, so that only the
 * records of processes that run one grow. Each frame carries what user
 * space needs to name it (an object address and an instruction offset)
 * and where it goes among the native frames (its anchor).
 *
 * Shared with Go through bpf2go (-type interp_frame, interp_frame_kind,
 * interp_frame_flag, interp_stop); internal/bpf/profiler decodes it.
 */
#ifndef BPFCOL_INTERP_H
#define BPFCOL_INTERP_H

/* Interpreter frames a record holds, past which a stack is cut: the
 * truncation marker takes one more slot. */
#define INTERP_MAX_FRAMES 512

enum interp_frame_kind {
	INTERP_FRAME_NONE = 0,
	INTERP_FRAME_CPYTHON = 1,   /* object: code object; offset: bytecode offset in bytes */
	INTERP_FRAME_TRUNCATED = 2, /* more frames than INTERP_MAX_FRAMES: the rest were cut */
	/* A HotSpot frame (bpfcol_hotspot.h). object: an nmethod or stub (a
	 * code blob in the code cache), offset the PC's in its code; or an
	 * interpreted Method*, offset the bytecode index. The top 16 bits of
	 * object hold its identity check. */
	INTERP_FRAME_HOTSPOT = 3,
	/* A V8 frame (bpfcol_v8.h), flagged INTERP_FRAME_AT_NATIVE. object:
	 * its SharedFunctionInfo; offset: the bytecode offset (interpreted
	 * frames). */
	INTERP_FRAME_V8 = 4,
};

enum interp_frame_flag {
	/* The instruction offset could not be read or made sense of: the
	 * frame is named without a line. */
	INTERP_FRAME_NO_OFFSET = 1 << 0,
	/* The frame is the native frame user[anchor] (a JIT's, or an
	 * interpreter's found by the native walk): it replaces it. */
	INTERP_FRAME_AT_NATIVE = 1 << 1,
};

/*
 * One interpreter frame.
 *
 * anchor says where the frame goes among the native frames. For a frame
 * flagged INTERP_FRAME_AT_NATIVE (HotSpot's, V8's) it is the index in user[] of
 * the native frame it is. For an interpreted frame of a loop (CPython) it
 * is the ordinal, counted from the leaf, of the interpreter-loop call that
 * runs it (0: the innermost
 * _PyEval_EvalFrameDefault): user space, which knows each file's
 * interpreter-loop addresses, puts the frames of call k leafward of the
 * k-th such native frame.
 */
struct interp_frame {
	u64 object;
	u32 offset;
	u16 anchor;
	u8 kind;  /* enum interp_frame_kind */
	u8 flags; /* enum interp_frame_flag */
};

/* Why an interpreter walk ended; counted at COUNTER_INTERP_STOP + reason. */
enum interp_stop {
	INTERP_STOP_END = 0,         /* reached the thread's outermost frame */
	INTERP_STOP_NO_THREAD_STATE, /* the thread runs no interpreter (no thread state) */
	INTERP_STOP_TLS_FAULT,       /* the thread state could not be found: a TSD/TLS read failed */
	INTERP_STOP_READ_FAULT,      /* a frame could not be read */
	INTERP_STOP_TRUNCATED,       /* INTERP_MAX_FRAMES reached: the stack was cut, with a marker */
	INTERP_STOP_BAD_LAYOUT,      /* the process's layout was refused (a bound the walk checks) */
	INTERP_STOP_NO_CODE_BLOB,    /* a PC in a JIT's code found no live code blob */
	INTERP_STOP_BAD_FRAME,       /* a JIT frame unwound to an impossible caller */
	INTERP_STOP_MAX,
};

/* What a frame of a JIT runtime's process that the native walk stepped
 * through by frame pointer turned out to be; counted at COUNTER_JIT_FRAME
 * + result. */
enum jit_frame_result {
	JIT_FRAME_RECORDED = 0, /* a frame of the runtime's language, recorded */
	JIT_FRAME_TYPED,        /* a frame of the runtime's own (entry, exit, stub): not recorded */
	JIT_FRAME_NOT_JIT,      /* neither: native code without CFI, or slots that hold no frame */
	JIT_FRAME_READ_FAULT,   /* its slots or the objects they point at could not be read */
	JIT_FRAME_RESULT_MAX,
};

/* A sample of a process that runs an interpreter: the record, then its
 * interpreter frames, leaf first. Only interp_frames of frames[] are sent. */
struct sample_interp {
	struct sample s;
	u32 interp_frames; /* frames[] filled, the truncation marker included */
	u32 interp_stop;   /* enum interp_stop */
	struct interp_frame frames[INTERP_MAX_FRAMES + 1];
};

const struct interp_frame *unused_interp_frame __attribute__((unused));
const enum interp_frame_kind *unused_interp_frame_kind __attribute__((unused));
const enum interp_frame_flag *unused_interp_frame_flag __attribute__((unused));
const enum interp_stop *unused_interp_stop __attribute__((unused));
const enum jit_frame_result *unused_jit_frame_result __attribute__((unused));
const struct sample_interp *unused_sample_interp __attribute__((unused));

#endif /* BPFCOL_INTERP_H */
