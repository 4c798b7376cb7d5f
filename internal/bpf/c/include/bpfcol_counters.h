/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Per-CPU event counters shared by bpfcol's BPF programs. Include after
 * defining `enum counter`, whose last member is COUNTER_MAX; user space
 * sums the per-CPU values of each index. The enum is anchored in BTF here,
 * so bpf2go (-type counter) generates its indexes for Go: a new counter is
 * one line in C.
 */
#ifndef BPFCOL_COUNTERS_H
#define BPFCOL_COUNTERS_H

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, u32);
	__type(value, u64);
} counters SEC(".maps");

const enum counter *unused_counter __attribute__((unused));

static __always_inline void count(enum counter c)
{
	u32 key = c;
	u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		*v += 1;
}

#endif /* BPFCOL_COUNTERS_H */
