/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Layout of the CFI unwind maps the sampler walks, shared with the Go
 * loader (internal/bpf/profiler/unwind.go, which mirrors every constant).
 *
 * unwind_rows is one flat array of 8-byte rows; every executable file's
 * compiled table (internal/unwind/cfi) is a contiguous run of it, sorted by
 * PC. unwind_procs maps a process to its executable mappings, sorted by
 * start address, each pointing at its file's run of rows.
 */
#ifndef BPFCOL_UNWIND_H
#define BPFCOL_UNWIND_H

/* Rule kinds of a row's low nibble (cfi.CFARule). */
#define UNWIND_CFA_NONE 0
#define UNWIND_CFA_RSP 1
#define UNWIND_CFA_RBP 2
#define UNWIND_CFA_PLT 3
#define UNWIND_CFA_SIGNAL 4
#define UNWIND_CFA_END 5
#define UNWIND_CFA_UNSUPPORTED 6

/* Rule kinds of a row's high nibble (cfi.RBPRule). */
#define UNWIND_RBP_UNCHANGED 0
#define UNWIND_RBP_AT_CFA 1
#define UNWIND_RBP_UNSUPPORTED 2

/* PLT entries: from this offset within a 16-byte entry the CFA is 8 higher. */
#define UNWIND_PLT_THRESHOLD 11

struct unwind_row {
	u32 pc;      /* PC relative to the mapping's table base */
	__s16 cfa_off; /* CFA = reg + cfa_off */
	u8 rules;    /* CFA rule | RBP rule << 4 */
	signed char rbp_off;  /* caller's RBP at CFA + rbp_off * 8 */
};

/* Kinds of mapping. */
#define UNWIND_MAPPING_CFI 0     /* rows describe it */
#define UNWIND_MAPPING_FP 1      /* no CFI (JIT, Go, a file without tables): frame pointers */
#define UNWIND_MAPPING_PENDING 2 /* its file's table is not loaded yet: frame pointers */

struct unwind_mapping {
	u64 start, end;  /* runtime addresses [start, end) */
	u64 table_base;  /* runtime address that row PCs are relative to */
	u32 row_first;   /* index of the table's first row in unwind_rows */
	u32 row_count;
	u32 kind;
	u32 pad;
};

#define UNWIND_MAX_MAPPINGS 512

struct unwind_proc {
	u32 count;
	u32 pad;
	struct unwind_mapping mappings[UNWIND_MAX_MAPPINGS];
};

/* Why a walk stopped; the counters live at COUNTER_UNWIND_STOP + reason. */
enum unwind_stop {
	UNWIND_STOP_COMPLETE = 0,    /* reached the CFI end marker: the process root */
	UNWIND_STOP_NO_TABLE,        /* process not loaded yet: frame pointers + leaf analysis */
	UNWIND_STOP_NO_CFI,          /* frame pointers ended in code without CFI */
	UNWIND_STOP_BAD_CFA,         /* the CFA did not move up the stack */
	UNWIND_STOP_READ_FAULT,      /* return address or saved RBP unreadable */
	UNWIND_STOP_DEPTH_LIMIT,     /* MAX_STACK_DEPTH frames */
	UNWIND_STOP_UNSUPPORTED,     /* a rule the unwinder cannot follow */
	UNWIND_STOP_OUTSIDE_MAPPINGS, /* zero, non-canonical or unmapped address */
	UNWIND_STOP_FP_END,          /* frame pointers ended (RBP 0) in code without CFI: Go's, JIT's root */
	UNWIND_STOP_URETPROBE,       /* a uretprobe's trampoline whose return address the kernel did not give */
	UNWIND_STOP_MAX,
};

#endif /* BPFCOL_UNWIND_H */
