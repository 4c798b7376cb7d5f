/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Per-CPU event counters shared by bpfcol's BPF programs. Include after
 * defining `enum counter`, whose last member is COUNTER_MAX; user space
 * sums the per-CPU values of each index.
 */
#ifndef BPFCOL_COUNTERS_H
#define BPFCOL_COUNTERS_H

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, u32);
	__type(value, u64);
} counters SEC(".maps");

static __always_inline void count(enum counter c)
{
	u32 key = c;
	u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		*v += 1;
}

#endif /* BPFCOL_COUNTERS_H */
