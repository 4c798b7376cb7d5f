// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Scope probes: one entry program and one exit program, attached to many
// uprobes. The attach cookie carries the probe id (low 32 bits) and flags
// (high 32 bits). A scope is keyed by (process, probe, thread), or by
// (process, probe, goroutine) for Go code, where the g pointer lives in R14
// (R28 on arm64) and goroutines move between threads. A depth counter absorbs nested and
// recursive calls: the start time is taken at depth 0->1 and one record is
// emitted at 1->0 when the scope lasted at least the probe's min duration.
//
// Thread scopes live in slots of task storage, reused call after call, so
// the common pair costs two task storage lookups and a clock read; scopes
// by goroutine (and thread scopes beyond the slots) live in an LRU hash.
//
// A probe whose exit is a return probe (uretprobe) counts only the nested
// calls whose return the kernel hooks: it keeps at most 64 pending per
// thread and lets deeper calls return unseen (bpfcol_uretprobe.h), so a
// deeper call does not deepen the scope, and an outermost call entered
// with 64 pending is not timed (counted), as its exit would never come.
//
// Each outermost scope gets a fresh trace id and span id at entry, which its
// record carries. When the sampler runs in the same collector, the scope is
// also written to open_scopes (bpfcol_scopes.h) while it is open, so every
// sample of its thread or goroutine links to it.

#include "bpfcol_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "bpfcol_scopes.h"
#include "bpfcol_uretprobe.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// The enums below are generated for Go by bpf2go (-type).

// Bits of the cookie flags (high 32 bits), as bit numbers: a 64-bit enum
// needs BTF that clang 14 does not emit.
enum cookie_bit {
	COOKIE_BIT_SCOPE_BY_G = 32,
	COOKIE_BIT_RETURN_PROBE = 33, // the probe's exit is a uretprobe
	COOKIE_BIT_FIXED = 63, // in fixed_cookie only: it is set
};
#define COOKIE_SCOPE_BY_G (1ULL << COOKIE_BIT_SCOPE_BY_G)
#define COOKIE_RETURN_PROBE (1ULL << COOKIE_BIT_RETURN_PROBE)
#define COOKIE_FIXED (1ULL << COOKIE_BIT_FIXED)

// Probe setting flags.
enum setting_flag {
	SETTING_MAIN_THREAD_ONLY = 1U << 0,
	SETTING_PID_FILTER = 1U << 1,
};

// Record flags.
enum record_flag {
	RECORD_MAIN_THREAD = 1U << 0,
};

// Counter indexes.
enum counter {
	COUNTER_RECORDS = 0,       // records emitted
	COUNTER_LOST_RINGBUF,      // ringbuf full: record lost
	COUNTER_EXIT_NO_ENTRY,     // exit without a matching entry: ignored
	COUNTER_SHORT,             // scope shorter than min_duration: dropped
	COUNTER_SCOPE_FULL,        // scope could not be stored
	COUNTER_FILTERED,          // entry filtered by thread or pid
	COUNTER_RETURN_UNPROBED,   // outermost entry whose return the kernel does not hook: not timed
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
	u32 linked;   // the scope is in open_scopes
	u32 pad;
	struct scope_link ids;
};

struct probe_setting {
	u64 min_duration_ns;
	u32 flags;    // enum setting_flag
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
	u32 flags;     // enum record_flag
	u32 pad;
	char comm[16]; // name of the thread that closed the scope
	u8 trace_id[16];
	u8 span_id[8];
};

// The arguments of a fill_records run (benchmarks only).
struct fill_args {
	u32 count;
	u32 probe_id;
};

// Scopes keyed by goroutine, and thread scopes that found no free slot in
// their thread's storage. Entries are deleted when the scope closes, so the
// LRU only evicts when more scopes are open than it holds.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); // resized by the loader
	__type(key, struct scope_key);
	__type(value, struct scope);
} scopes SEC(".maps");

// A thread's scopes live in its task storage: no hashing, no insert or
// delete per call (a closed scope leaves its slot free for the next), and the
// kernel frees them with the thread.
#define THREAD_SLOTS 8

struct thread_scope {
	u64 start_ns;
	u32 probe_id;
	u32 depth;    // 0: the slot is free
	u32 nested;
	u32 linked;   // the scope is in open_scopes
	struct scope_link ids;
};

struct thread_scopes {
	u32 in_hash;  // scopes of the thread that overflowed into the scopes map
	u32 pad;
	struct thread_scope slot[THREAD_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_scopes);
} thread_scopes SEC(".maps");

// Set by the loader when uprobe programs may use task storage (kernel 6.2+
// lets kprobe-type programs call bpf_task_storage_get). Without it thread
// scopes go to the scopes map too; the verifier drops the dead branch.
const volatile bool thread_storage = false;

// Set by the loader for a reader that polls: a record wakes it only once
// this many bytes wait, as a wakeup costs the probed thread microseconds.
// Zero wakes the reader whenever it has caught up (the ringbuf's default).
const volatile u64 wakeup_bytes = 0;

// Set by the loader in the copies of the scope programs it loads per cookie:
// the cookie as a constant, as reading it costs a helper call (~20 ns here,
// a tenth of the programs' cost). Zero: read the attach cookie.
const volatile u64 fixed_cookie = 0;

static __always_inline u64 cookie_of(struct pt_regs *ctx)
{
	if (fixed_cookie & COOKIE_FIXED)
		return fixed_cookie;
	return bpf_get_attach_cookie(ctx);
}

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

#include "bpfcol_counters.h"

// Anchor the shared types in BTF so bpf2go mirrors them in Go.
const struct scope_record *unused_scope_record __attribute__((unused));
const struct probe_setting *unused_probe_setting __attribute__((unused));
const struct pid_filter_key *unused_pid_filter_key __attribute__((unused));
const struct fill_args *unused_fill_args __attribute__((unused));
const enum cookie_bit *unused_cookie_bit __attribute__((unused));
const enum setting_flag *unused_setting_flag __attribute__((unused));
const enum record_flag *unused_record_flag __attribute__((unused));

// filtered reports whether the probe's filters ignore this thread. Filters
// apply to outermost entries only; an exit finds no scope for a filtered
// entry, and asks again so as not to count it as an exit without entry.
static __always_inline bool filtered(const struct probe_setting *set, u64 pid_tgid, u32 id)
{
	u32 pid = pid_tgid >> 32;
	if ((set->flags & SETTING_MAIN_THREAD_ONLY) && (u32)pid_tgid != pid)
		return true;
	if (set->flags & SETTING_PID_FILTER) {
		struct pid_filter_key pk = { .probe_id = id, .pid = pid };
		if (!bpf_map_lookup_elem(&pid_filter, &pk))
			return true;
	}
	return false;
}

// Set by the loader: where this receiver's probe ids start among those of
// every uprobe receiver writing open_scopes, so a sample names its probe.
const volatile u32 probe_id_base = 0;

// new_ids gives an outermost scope its trace and span ids: random, and
// never all zero, which OTLP reads as no id.
static __always_inline void new_ids(struct scope_link *ids, u32 probe_id)
{
	u32 *w = (u32 *)ids->trace_id;
#pragma unroll
	for (int i = 0; i < 6; i++)
		w[i] = bpf_get_prandom_u32();
	w[0] |= 1;
	w[4] |= 1;
	ids->probe_id = probe_id_base + probe_id;
	ids->pad = 0;
}

// link_open writes an outermost scope to open_scopes, unless another scope
// of the thread or goroutine is there already: samples link to the
// outermost open scope. It returns whether it wrote.
static __always_inline u32 link_open(u64 pid_tgid, bool by_g, u64 id, struct scope_link *ids)
{
	if (!scope_links)
		return 0;
	struct open_scope_key k = {
		.pid = pid_tgid >> 32,
		.kind = by_g ? SCOPE_KIND_GOROUTINE : SCOPE_KIND_THREAD,
		.id = id,
	};
	return bpf_map_update_elem(&open_scopes, &k, ids, BPF_NOEXIST) == 0;
}

static __always_inline void link_close(u64 pid_tgid, bool by_g, u64 id)
{
	if (!scope_links)
		return;
	struct open_scope_key k = {
		.pid = pid_tgid >> 32,
		.kind = by_g ? SCOPE_KIND_GOROUTINE : SCOPE_KIND_THREAD,
		.id = id,
	};
	bpf_map_delete_elem(&open_scopes, &k);
}

// open_in_map opens a scope in the scopes map; it returns whether it did.
static __always_inline bool open_in_map(struct scope_key *key, u64 cookie, u64 pid_tgid)
{
	struct scope fresh = { .start_ns = bpf_ktime_get_ns(), .depth = 1, .nested = 0 };
	new_ids(&fresh.ids, key->probe_id);
	fresh.linked = link_open(pid_tgid, cookie & COOKIE_SCOPE_BY_G, key->scope, &fresh.ids);
	if (bpf_map_update_elem(&scopes, key, &fresh, BPF_ANY)) {
		if (fresh.linked)
			link_close(pid_tgid, cookie & COOKIE_SCOPE_BY_G, key->scope);
		count(COUNTER_SCOPE_FULL);
		return false;
	}
	return true;
}

// An outermost scope that closed.
struct closed_scope {
	u64 start_ns;
	u32 nested;
	u32 linked;
	struct scope_link ids;
};

// What close_in_map found.
enum closed {
	CLOSED_NONE,   // no open scope
	CLOSED_INNER,  // an inner scope closed: depth went down
	CLOSED_OUTER,  // the outermost scope closed
};

static __always_inline enum closed close_in_map(struct scope_key *key, struct closed_scope *out)
{
	struct scope *s = bpf_map_lookup_elem(&scopes, key);
	if (!s)
		return CLOSED_NONE;
	if (s->depth > 1) {
		s->depth--;
		return CLOSED_INNER;
	}
	out->start_ns = s->start_ns;
	out->nested = s->nested;
	out->linked = s->linked;
	out->ids = s->ids;
	bpf_map_delete_elem(&scopes, key);
	return CLOSED_OUTER;
}

static __always_inline void key_of(struct scope_key *key, u64 cookie, u64 pid_tgid, struct pt_regs *ctx)
{
	key->pid = pid_tgid >> 32;
	key->probe_id = (u32)cookie;
	if (cookie & COOKIE_SCOPE_BY_G)
		key->scope = REGS_GO_G(ctx);
	else
		key->scope = (u32)pid_tgid;
}

// entry_in_map is the whole entry for scopes kept in the scopes map.
static __always_inline void entry_in_map(struct pt_regs *ctx, u64 cookie, u64 pid_tgid)
{
	struct scope_key key = {};
	key_of(&key, cookie, pid_tgid, ctx);
	bool unprobed = (cookie & COOKIE_RETURN_PROBE) && return_unprobed(bpf_get_current_task_btf());
	struct scope *s = bpf_map_lookup_elem(&scopes, &key);
	if (s) {
		if (!unprobed)
			s->depth++;
		s->nested++;
		return;
	}
	u32 id = key.probe_id;
	struct probe_setting *set = bpf_map_lookup_elem(&settings, &id);
	if (!set)
		return;
	if (filtered(set, pid_tgid, id)) {
		count(COUNTER_FILTERED);
		return;
	}
	if (unprobed) {
		count(COUNTER_RETURN_UNPROBED);
		return;
	}
	open_in_map(&key, cookie, pid_tgid);
}

// pid_tgid_of is bpf_get_current_pid_tgid() from a task pointer already at
// hand: loads instead of a helper call, which costs ~20 ns here.
static __always_inline u64 pid_tgid_of(struct task_struct *task)
{
	return (u64)task->tgid << 32 | (u32)task->pid;
}

// entry_in_thread is the entry for thread scopes in task storage.
static __always_inline void entry_in_thread(struct pt_regs *ctx, u64 cookie)
{
	u32 id = (u32)cookie;
	struct task_struct *task = bpf_get_current_task_btf();
	u64 pid_tgid = pid_tgid_of(task);
	struct thread_scopes *ts = bpf_task_storage_get(&thread_scopes, task, 0, 0);
	struct thread_scope *free = NULL;
	struct scope_key key = {};
	bool unprobed = (cookie & COOKIE_RETURN_PROBE) && return_unprobed(task);
	if (ts) {
#pragma unroll
		for (int i = 0; i < THREAD_SLOTS; i++) {
			struct thread_scope *sl = &ts->slot[i];
			if (!sl->depth) {
				if (!free)
					free = sl;
			} else if (sl->probe_id == id) {
				if (!unprobed)
					sl->depth++;
				sl->nested++;
				return;
			}
		}
		if (ts->in_hash) {
			key_of(&key, cookie, pid_tgid, ctx);
			struct scope *s = bpf_map_lookup_elem(&scopes, &key);
			if (s) {
				if (!unprobed)
					s->depth++;
				s->nested++;
				return;
			}
		}
	}

	struct probe_setting *set = bpf_map_lookup_elem(&settings, &id);
	if (!set)
		return;
	if (filtered(set, pid_tgid, id)) {
		count(COUNTER_FILTERED);
		return;
	}
	if (unprobed) {
		count(COUNTER_RETURN_UNPROBED);
		return;
	}
	if (!ts) {
		// The thread's first scope. Creating can fail (memory, or task
		// storage busy on this CPU): the scope is then not stored, as when
		// the map is full, and its exit counts as one without entry.
		ts = bpf_task_storage_get(&thread_scopes, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!ts) {
			count(COUNTER_SCOPE_FULL);
			return;
		}
		free = &ts->slot[0];
	}
	if (free) {
		free->probe_id = id;
		free->nested = 0;
		new_ids(&free->ids, id);
		free->linked = link_open(pid_tgid, false, (u32)pid_tgid, &free->ids);
		free->start_ns = bpf_ktime_get_ns();
		free->depth = 1;
		return;
	}
	// More scopes open on this thread than it has slots.
	key_of(&key, cookie, pid_tgid, ctx);
	if (open_in_map(&key, cookie, pid_tgid))
		ts->in_hash++;
}

SEC("uprobe")
int scope_entry(struct pt_regs *ctx)
{
	u64 cookie = cookie_of(ctx);
	if (thread_storage && !(cookie & COOKIE_SCOPE_BY_G))
		entry_in_thread(ctx, cookie);
	else
		entry_in_map(ctx, cookie, bpf_get_current_pid_tgid());
	return 0;
}

// exit_without_entry counts an exit that found no scope, unless the probe's
// filters ignored its entry.
static __always_inline void exit_without_entry(u64 pid_tgid, u32 id)
{
	struct probe_setting *set = bpf_map_lookup_elem(&settings, &id);
	if (set && filtered(set, pid_tgid, id))
		return;
	count(COUNTER_EXIT_NO_ENTRY);
}

// close_in_thread closes or makes shallower the thread scope of the probe.
static __always_inline enum closed close_in_thread(struct pt_regs *ctx, struct task_struct *task, u64 cookie,
						    u64 pid_tgid, struct closed_scope *out)
{
	u32 id = (u32)cookie;
	struct thread_scopes *ts = bpf_task_storage_get(&thread_scopes, task, 0, 0);
	if (!ts)
		return CLOSED_NONE;
#pragma unroll
	for (int i = 0; i < THREAD_SLOTS; i++) {
		struct thread_scope *sl = &ts->slot[i];
		if (sl->depth && sl->probe_id == id) {
			if (sl->depth > 1) {
				sl->depth--;
				return CLOSED_INNER;
			}
			out->start_ns = sl->start_ns;
			out->nested = sl->nested;
			out->linked = sl->linked;
			out->ids = sl->ids;
			sl->depth = 0;
			return CLOSED_OUTER;
		}
	}
	if (!ts->in_hash)
		return CLOSED_NONE;
	struct scope_key key = {};
	key_of(&key, cookie, pid_tgid, ctx);
	enum closed c = close_in_map(&key, out);
	if (c == CLOSED_OUTER)
		ts->in_hash--;
	return c;
}

SEC("uprobe")
int scope_exit(struct pt_regs *ctx)
{
	u64 now = bpf_ktime_get_ns();
	u64 cookie = cookie_of(ctx);
	u32 id = (u32)cookie;
	u64 pid_tgid;
	struct closed_scope cs = {};
	enum closed c;
	if (thread_storage && !(cookie & COOKIE_SCOPE_BY_G)) {
		struct task_struct *task = bpf_get_current_task_btf();
		pid_tgid = pid_tgid_of(task);
		c = close_in_thread(ctx, task, cookie, pid_tgid, &cs);
	} else {
		pid_tgid = bpf_get_current_pid_tgid();
		struct scope_key key = {};
		key_of(&key, cookie, pid_tgid, ctx);
		c = close_in_map(&key, &cs);
	}
	if (c == CLOSED_NONE) {
		exit_without_entry(pid_tgid, id);
		return 0;
	}
	if (c == CLOSED_INNER)
		return 0;
	if (cs.linked) {
		bool by_g = cookie & COOKIE_SCOPE_BY_G;
		link_close(pid_tgid, by_g, by_g ? REGS_GO_G(ctx) : (u32)pid_tgid);
	}
	u64 start = cs.start_ns;

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
	u32 pid = pid_tgid >> 32;
	r->start_ns = start;
	r->end_ns = now;
	r->pid = pid;
	r->tid = (u32)pid_tgid;
	r->probe_id = id;
	r->nested = cs.nested;
	r->flags = (u32)pid_tgid == pid ? RECORD_MAIN_THREAD : 0;
	r->pad = 0;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	__builtin_memcpy(r->trace_id, cs.ids.trace_id, sizeof(r->trace_id));
	__builtin_memcpy(r->span_id, cs.ids.span_id, sizeof(r->span_id));
	u64 flags = 0;
	if (wakeup_bytes)
		flags = bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(r, flags);
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
	struct scope_link ids;
	new_ids(&ids, args->probe_id);
	__builtin_memcpy(r->trace_id, ids.trace_id, sizeof(r->trace_id));
	__builtin_memcpy(r->span_id, ids.span_id, sizeof(r->span_id));
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
