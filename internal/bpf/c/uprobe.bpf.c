// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Scope probes: one entry program and one exit program, attached to many
// uprobes. The attach cookie carries the probe id (low 32 bits) and flags
// (high 32 bits). A scope is keyed by (process, probe, thread), or by
// (process, probe, goroutine) for Go code, where the g pointer lives in R14
// and goroutines move between threads. A depth counter absorbs nested and
// recursive calls: the start time is taken at depth 0->1 and one record is
// emitted at 1->0 when the scope lasted at least the probe's min duration.

#include "bpfcol_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Cookie flags (high 32 bits), mirrored in Go (scopeprobe).
#define COOKIE_SCOPE_BY_G (1ULL << 32)

// Probe setting flags, mirrored in Go.
#define SETTING_MAIN_THREAD_ONLY (1U << 0)
#define SETTING_PID_FILTER (1U << 1)

// Record flags, mirrored in Go.
#define RECORD_MAIN_THREAD (1U << 0)

// Counter indexes, mirrored in Go.
enum counter {
	COUNTER_RECORDS = 0,       // records emitted
	COUNTER_LOST_RINGBUF,      // ringbuf full: record lost
	COUNTER_EXIT_NO_ENTRY,     // exit without a matching entry: ignored
	COUNTER_SHORT,             // scope shorter than min_duration: dropped
	COUNTER_SCOPE_FULL,        // scope could not be stored
	COUNTER_FILTERED,          // entry filtered by thread or pid
	COUNTER_MAX,
};

struct scope_key {
	u32 pid;      // tgid
	u32 probe_id;
	u64 scope;    // tid, or the goroutine's g pointer
};

struct scope {
	u64 start_ns;
	u32 depth;
	u32 nested;   // inner scopes absorbed by the outermost one
};

struct probe_setting {
	u64 min_duration_ns;
	u32 flags;    // SETTING_*
	u32 pad;
};

struct pid_filter_key {
	u32 probe_id;
	u32 pid;
};

struct scope_record {
	u64 start_ns;  // CLOCK_MONOTONIC at depth 0->1
	u64 end_ns;    // CLOCK_MONOTONIC at depth 1->0
	u32 pid;
	u32 tid;       // the thread that closed the scope
	u32 probe_id;
	u32 nested;
	u32 flags;     // RECORD_*
	u32 pad;
	char comm[16]; // name of the thread that closed the scope
};

// The arguments of a fill_records run (benchmarks only).
struct fill_args {
	u32 count;
	u32 probe_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); // resized by the loader
	__type(key, struct scope_key);
	__type(value, struct scope);
} scopes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); // resized by the loader: one per probe
	__type(key, u32);
	__type(value, struct probe_setting);
} settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); // resized by the loader
	__type(key, struct pid_filter_key);
	__type(value, u8);
} pid_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); // resized by the loader
} records SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, u32);
	__type(value, u64);
} counters SEC(".maps");

// Anchor the shared types in BTF so bpf2go mirrors them in Go.
const struct scope_record *unused_scope_record __attribute__((unused));
const struct probe_setting *unused_probe_setting __attribute__((unused));
const struct pid_filter_key *unused_pid_filter_key __attribute__((unused));
const struct fill_args *unused_fill_args __attribute__((unused));

static __always_inline void count(enum counter c)
{
	u32 key = c;
	u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		*v += 1;
}

static __always_inline void scope_key_of(struct pt_regs *ctx, u64 pid_tgid, struct scope_key *key)
{
	u64 cookie = bpf_get_attach_cookie(ctx);
	key->pid = pid_tgid >> 32;
	key->probe_id = (u32)cookie;
	if (cookie & COOKIE_SCOPE_BY_G)
		key->scope = ctx->r14;
	else
		key->scope = (u32)pid_tgid;
}

SEC("uprobe")
int scope_entry(struct pt_regs *ctx)
{
	u64 now = bpf_ktime_get_ns();
	u64 pid_tgid = bpf_get_current_pid_tgid();
	struct scope_key key = {};
	scope_key_of(ctx, pid_tgid, &key);

	struct scope *s = bpf_map_lookup_elem(&scopes, &key);
	if (s) {
		s->depth++;
		s->nested++;
		return 0;
	}

	// Filters apply to outermost entries only: an exit finds no scope for a
	// filtered entry and is ignored.
	u32 id = key.probe_id;
	struct probe_setting *set = bpf_map_lookup_elem(&settings, &id);
	if (!set)
		return 0;
	if ((set->flags & SETTING_MAIN_THREAD_ONLY) && (u32)pid_tgid != key.pid) {
		count(COUNTER_FILTERED);
		return 0;
	}
	if (set->flags & SETTING_PID_FILTER) {
		struct pid_filter_key pk = { .probe_id = id, .pid = key.pid };
		if (!bpf_map_lookup_elem(&pid_filter, &pk)) {
			count(COUNTER_FILTERED);
			return 0;
		}
	}

	struct scope fresh = { .start_ns = now, .depth = 1, .nested = 0 };
	if (bpf_map_update_elem(&scopes, &key, &fresh, BPF_ANY))
		count(COUNTER_SCOPE_FULL);
	return 0;
}

SEC("uprobe")
int scope_exit(struct pt_regs *ctx)
{
	u64 now = bpf_ktime_get_ns();
	u64 pid_tgid = bpf_get_current_pid_tgid();
	struct scope_key key = {};
	scope_key_of(ctx, pid_tgid, &key);

	struct scope *s = bpf_map_lookup_elem(&scopes, &key);
	if (!s) {
		// A thread the entry filtered is not an exit without entry.
		u32 pid_id = key.probe_id;
		struct probe_setting *set = bpf_map_lookup_elem(&settings, &pid_id);
		if (set && (set->flags & SETTING_MAIN_THREAD_ONLY) && (u32)pid_tgid != key.pid)
			return 0;
		if (set && (set->flags & SETTING_PID_FILTER)) {
			struct pid_filter_key pk = { .probe_id = pid_id, .pid = key.pid };
			if (!bpf_map_lookup_elem(&pid_filter, &pk))
				return 0;
		}
		count(COUNTER_EXIT_NO_ENTRY);
		return 0;
	}
	if (s->depth > 1) {
		s->depth--;
		return 0;
	}
	u64 start = s->start_ns;
	u32 nested = s->nested;
	bpf_map_delete_elem(&scopes, &key);

	u32 id = key.probe_id;
	struct probe_setting *set = bpf_map_lookup_elem(&settings, &id);
	if (!set)
		return 0;
	if (now - start < set->min_duration_ns) {
		count(COUNTER_SHORT);
		return 0;
	}

	struct scope_record *r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r) {
		count(COUNTER_LOST_RINGBUF);
		return 0;
	}
	r->start_ns = start;
	r->end_ns = now;
	r->pid = key.pid;
	r->tid = (u32)pid_tgid;
	r->probe_id = id;
	r->nested = nested;
	r->flags = (u32)pid_tgid == key.pid ? RECORD_MAIN_THREAD : 0;
	r->pad = 0;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	bpf_ringbuf_submit(r, 0);
	count(COUNTER_RECORDS);
	return 0;
}

// fill_records writes synthetic records into the same ringbuf, so the user
// space path (ringbuf -> plog) can be benchmarked without trap costs. Run
// with BPF_PROG_TEST_RUN; never attached.
static long fill_one(u32 i, void *data)
{
	struct fill_args *args = data;
	struct scope_record *r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r) {
		count(COUNTER_LOST_RINGBUF);
		return 0;
	}
	u64 now = bpf_ktime_get_ns();
	u64 pid_tgid = bpf_get_current_pid_tgid();
	r->start_ns = now - 1000000 - i;
	r->end_ns = now;
	r->pid = pid_tgid >> 32;
	r->tid = (u32)pid_tgid;
	r->probe_id = args->probe_id;
	r->nested = i & 3;
	r->flags = 0;
	r->pad = 0;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	bpf_ringbuf_submit(r, 0);
	count(COUNTER_RECORDS);
	return 0;
}

SEC("syscall")
int fill_records(struct fill_args *ctx)
{
	struct fill_args args = { .count = ctx->count, .probe_id = ctx->probe_id };
	bpf_loop(args.count, fill_one, &args, 0);
	return 0;
}
