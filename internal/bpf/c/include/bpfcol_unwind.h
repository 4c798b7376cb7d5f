/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Layout of the CFI unwind maps the sampler walks, shared with the Go
 * loader (internal/bpf/profiler, whose types bpf2go generates from these).
 *
 * unwind_rows is one flat array of 8-byte rows; every executable file's
 * compiled table (internal/unwind/cfi) is a contiguous run of it, sorted by
 * file offset. unwind_files maps a file (device, inode) to its run, so a
 * table loaded once serves every process that maps the file. unwind_procs
 * maps a process to its executable mappings, sorted by start address, each
 * naming its file and where the file's offset 0 lies in memory: no process
 * entry changes when a table is loaded or evicted.
 */
#ifndef BPFCOL_UNWIND_H
#define BPFCOL_UNWIND_H

/* Rule kinds of a row's bits 0-2 (cfi.CFARule). */
#define UNWIND_CFA_NONE 0
#define UNWIND_CFA_SP 1
#define UNWIND_CFA_FP 2
#define UNWIND_CFA_PLT 3
#define UNWIND_CFA_SIGNAL 4
#define UNWIND_CFA_END 5
#define UNWIND_CFA_UNSUPPORTED 6

/* Bit 3 of a row's rules: its slots (fp_off) are words from the frame's SP,
 * not from the CFA. The loader sets it where the CFA is SP-based and a slot
 * lies too far below the CFA for a byte of words: arm64's wide frames,
 * whose frame record sits at the bottom. */
#define UNWIND_SLOTS_AT_SP 8

/* Rule kinds of a row's bits 4-5: the caller's frame pointer (cfi.FPRule). */
#define UNWIND_FP_UNCHANGED 0
#define UNWIND_FP_AT_CFA 1
#define UNWIND_FP_UNSUPPORTED 2

/* Rule kinds of a row's bits 6-7: the return address (cfi.RARule, as the
 * loader packs it). x86-64's rows all hold UNWIND_RA_CALL_SLOT. */
#define UNWIND_RA_CALL_SLOT 0   /* at CFA-8 */
#define UNWIND_RA_IN_LINK 1     /* in the link register (arm64's x30) */
#define UNWIND_RA_ABOVE_FP 2    /* right above the saved frame pointer: a frame record at fp_off */
#define UNWIND_RA_AT_OFF 3      /* at fp_off, the frame pointer not restored from the frame */

/* PLT entries: from this offset within a 16-byte entry the CFA is 8 higher. */
#define UNWIND_PLT_THRESHOLD 11

struct unwind_row {
	u32 pc;      /* file offset, relative to the table's row_base */
	__s16 cfa_off; /* CFA = reg + cfa_off */
	u8 rules;    /* CFA rule | UNWIND_SLOTS_AT_SP | FP rule << 4 | RA rule << 6 */
	/* The caller's frame pointer (or, UNWIND_RA_AT_OFF, the return
	 * address) at CFA + fp_off * 8, or SP + fp_off * 8 with
	 * UNWIND_SLOTS_AT_SP. */
	signed char fp_off;
};

/* Kinds of mapping, generated for Go by bpf2go (-type unwind_mapping_kind). */
enum unwind_mapping_kind {
	UNWIND_MAPPING_FILE = 0, /* a file's: its table is looked up in unwind_files */
	UNWIND_MAPPING_ANON = 1, /* no file (JIT code): frame pointers */
	UNWIND_MAPPING_VDSO = 2, /* the vDSO: its table, if one is loaded, is the file UNWIND_VDSO_INO of device 0 */
};

/* The file key a table of the vDSO, which has no file, is loaded under. */
#define UNWIND_VDSO_INO 1

/* Protection of a mapping, as vm_flags holds it (VM_READ...VM_SHARED). */
#define UNWIND_PROT_READ 1
#define UNWIND_PROT_WRITE 2
#define UNWIND_PROT_EXEC 4
#define UNWIND_PROT_SHARED 8

struct unwind_mapping {
	u64 start, end;  /* runtime addresses [start, end) */
	u64 file_base;   /* runtime address of the file's offset 0: start - pgoff * page size */
	u64 ino;         /* the mapped file, as /proc/PID/maps shows it */
	u32 dev;         /* the kernel's encoding: major << 20 | minor */
	u16 kind;        /* enum unwind_mapping_kind */
	u16 prot;        /* UNWIND_PROT_* */
};

/* Executable mappings one process entry holds (a power of two: searches mask with it). */
#define UNWIND_MAX_MAPPINGS 64

/* Flags of a process entry, generated for Go by bpf2go (-type unwind_proc_flag). */
enum unwind_proc_flag {
	UNWIND_PROC_OVERFLOW = 1, /* more executable mappings than held: the rest are missing */
};

/*
 * A process's executable mappings. An entry is only ever replaced whole
 * (a map update), never changed in place but for asked_ns: a walk on
 * another CPU finds the old entry or the new one, never one half written.
 * The hash links the new element before it unlinks the old, but frees the
 * old one to its allocator's per-CPU cache at once (bpf_mem_cache_free,
 * not after an RCU grace period): a walk still holding the old entry reads
 * another entry's bytes if the updating CPU allocates that element again
 * within the walk's microseconds. Entries are replaced about once per
 * process image, so that is left as it is; the aggregator checks every
 * frame against the process's mappings.
 */
struct unwind_proc {
	u64 mm;          /* the address space the mappings were read from: another one (exec) reads them again */
	u64 start_ns;    /* the process's start (its leader's start_time): a reused pid has another */
	u64 composed_ns; /* when the mappings were read */
	u64 asked_ns;    /* when a walk last asked for them to be read again */
	u32 count;
	u32 flags;       /* enum unwind_proc_flag */
	struct unwind_mapping mappings[UNWIND_MAX_MAPPINGS];
};

struct unwind_file_key {
	u64 ino;
	u32 dev;
	u32 pad;
};

/* States of a file's table, generated for Go by bpf2go (-type unwind_file_state). */
enum unwind_file_state {
	UNWIND_FILE_PENDING = 0, /* asked for, being built: frame pointers meanwhile */
	UNWIND_FILE_CFI = 1,     /* rows [row_first, row_first + row_count), then their index */
	UNWIND_FILE_FP = 2,      /* no table to walk (Go, no CFI, unreadable): frame pointers */
};

struct unwind_file {
	u64 row_base;   /* the file offset rows' PCs are relative to */
	u32 row_first;  /* index of the table's first row in unwind_rows */
	u32 row_count;
	u32 state;      /* enum unwind_file_state */
	u32 used;       /* ktime >> 30 (about seconds) when a walk last read it: eviction order */
	/* The table's index follows its rows, two u32 entries per row slot:
	 * entry g is the last row whose PC is at most g << index_shift (0 if
	 * none), for g in [0, index_granules]. A search in granule g reads only
	 * the rows between entries g and g+1, a few neighbours, instead of
	 * halving the whole table: each halving of a large table was a cache
	 * and TLB miss. */
	u32 index_shift;
	u32 index_granules;
};

/* Why a walk stopped; the counters live at COUNTER_UNWIND_STOP + reason. */
enum unwind_stop {
	UNWIND_STOP_COMPLETE = 0,    /* reached the CFI end marker: the process root */
	UNWIND_STOP_NO_TABLE,        /* process or file not loaded yet: frame pointers + leaf analysis */
	UNWIND_STOP_NO_CFI,          /* frame pointers ended in code without CFI */
	UNWIND_STOP_BAD_CFA,         /* the CFA did not move up the stack */
	UNWIND_STOP_READ_FAULT,      /* return address or saved frame pointer unreadable */
	UNWIND_STOP_DEPTH_LIMIT,     /* MAX_STACK_DEPTH frames */
	UNWIND_STOP_UNSUPPORTED,     /* a rule the unwinder cannot follow */
	UNWIND_STOP_OUTSIDE_MAPPINGS, /* zero, non-canonical or unmapped address */
	UNWIND_STOP_FP_END,          /* frame pointers ended (a zero one) in code without CFI: Go's, JIT's root */
	UNWIND_STOP_URETPROBE,       /* a uretprobe's trampoline whose return address the kernel did not give */
	UNWIND_STOP_MAX,
};

#endif /* BPFCOL_UNWIND_H */
