// Package kernelsym names kernel addresses for profiles.
//
// The preferred path asks the kernel itself: a BPF program
// (internal/bpf/ksymprog) prints each address with %pS or %pB, and this
// package parses "name+0xoff/0xsize [module]". Only the addresses a profile
// holds are resolved, and /proc/kallsyms is never opened.
//
// When that program cannot load (no CAP_PERFMON, so the verifier refuses
// bpf_snprintf; or a kernel older than 5.17) the Symbolizer falls back to a
// parsed /proc/kallsyms snapshot, logs why once, and re-reads the file only
// when it can have changed.
package kernelsym
