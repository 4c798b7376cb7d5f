/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Open probe scopes, shared by two collections: the scope programs
 * (uprobe.bpf.c) write the outermost scope open on a thread or goroutine,
 * the sampler (profiler.bpf.c) reads it at each sample to link the sample
 * to the scope's log record. User space creates the map once and hands it
 * to both loads (internal/bpf/scopes); a collection loaded without it keeps
 * the one-entry placeholder below and its constant scope_links unset.
 */
#ifndef BPFCOL_SCOPES_H
#define BPFCOL_SCOPES_H

// What an open scope is keyed by: a thread, or a Go goroutine (its g
// pointer, R14 on amd64), as the scope programs key it.
enum scope_kind {
	SCOPE_KIND_THREAD = 0,
	SCOPE_KIND_GOROUTINE = 1,
};

struct open_scope_key {
	u32 pid;  // tgid
	u32 kind; // enum scope_kind
	u64 id;   // tid, or g pointer
};

// The ids of an open outermost scope, as its log record will carry them.
struct scope_link {
	u8 trace_id[16];
	u8 span_id[8];
	u32 probe_id;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1); // replaced by the shared map when in use
	__type(key, struct open_scope_key);
	__type(value, struct scope_link);
} open_scopes SEC(".maps");

// Set by the loader when open_scopes is the shared map.
const volatile bool scope_links = false;

const struct open_scope_key *unused_open_scope_key __attribute__((unused));
const struct scope_link *unused_scope_link __attribute__((unused));
const enum scope_kind *unused_scope_kind __attribute__((unused));

#endif /* BPFCOL_SCOPES_H */
