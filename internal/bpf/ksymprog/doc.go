// Package ksymprog loads bpfcol's kernel address formatter: a
// BPF_PROG_TYPE_SYSCALL program, run on demand through BPF_PROG_TEST_RUN,
// that prints kernel addresses with bpf_snprintf's %pS and %pB. The kernel
// resolves the names itself, so user space never reads /proc/kallsyms.
//
// Requests and results are exchanged through BPF_F_MMAPABLE array maps.
// Parsing the text is internal/symbolize/kernelsym's job.
package ksymprog

// MaxBatch is the most addresses one program run formats, mirrored from
// KSYM_MAX_BATCH in ksym.bpf.c. Format splits larger requests.
const MaxBatch = 1024

// Flags of a request, mirrored from ksym.bpf.c.
const requestReturn = 1 << 0
