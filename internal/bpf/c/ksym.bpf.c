// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Kernel address formatter: a BPF_PROG_TYPE_SYSCALL program that user space
// runs on demand (BPF_PROG_TEST_RUN). It prints each requested address with
// bpf_snprintf's %pS (a sampled PC) or %pB (a return address: the kernel
// looks up addr-1), so the kernel resolves exactly the addresses a profile
// needs and user space never has to read all of /proc/kallsyms.
//
// Requests and results travel through BPF_F_MMAPABLE arrays, so neither side
// makes a syscall per address; the request count comes in the run's context.

#include "bpfcol_types.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Mirrored in Go (ksymprog). One run formats at most KSYM_MAX_BATCH
// addresses: bounded time in the kernel, bounded map memory. User space
// maps both arrays for its life, all of their pages resident (272 KiB at
// 1024; 2.7 MB at the 10240 of before), while a report rarely asks for
// more than a few hundred new kernel addresses.
#define KSYM_MAX_BATCH 1024
// KSYM_NAME_LEN is 512 since 6.1, but names that long are rare; a longer
// result is reported truncated through ksym_text.len.
#define KSYM_TEXT_LEN 248

#define KSYM_REQ_RETURN (1U << 0)

struct ksym_request {
	u64 addr;
	u32 flags; // KSYM_REQ_*
	u32 pad;
};

struct ksym_text {
	// bpf_snprintf's result: the length the text needs including its NUL
	// (more than KSYM_TEXT_LEN when truncated), or a negative errno.
	s32 len;
	u32 pad;
	char text[KSYM_TEXT_LEN];
};

// The run's context (ctx_in of BPF_PROG_TEST_RUN).
struct ksym_args {
	u32 count;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSYM_MAX_BATCH);
	__type(key, u32);
	__type(value, struct ksym_request);
} requests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSYM_MAX_BATCH);
	__type(key, u32);
	__type(value, struct ksym_text);
} texts SEC(".maps");

// bpf_snprintf takes its format only from read-only map memory: .rodata.
static const char fmt_pc[] = "%pS";
static const char fmt_return[] = "%pB";

static long format_one(u32 i, void *unused)
{
	u32 key = i;
	struct ksym_request *req = bpf_map_lookup_elem(&requests, &key);
	struct ksym_text *out = bpf_map_lookup_elem(&texts, &key);
	if (!req || !out)
		return 1;

	u64 args[1] = { req->addr };
	if (req->flags & KSYM_REQ_RETURN)
		out->len = bpf_snprintf(out->text, sizeof(out->text), fmt_return, args, sizeof(args));
	else
		out->len = bpf_snprintf(out->text, sizeof(out->text), fmt_pc, args, sizeof(args));
	return 0;
}

// Returns the number of addresses formatted, which is args->count unless
// the count is out of range (then 0).
SEC("syscall")
int format_addrs(struct ksym_args *args)
{
	u32 n = args->count;
	if (n > KSYM_MAX_BATCH)
		return 0;
	return bpf_loop(n, format_one, NULL, 0);
}

// The core kernel text's bounds, which user space caches answers within;
// zero where kallsyms hides them. text_bounds writes them.
struct ksym_bounds {
	u64 stext;
	u64 etext;
};

struct ksym_bounds bounds;

static const char name_stext[] = "_stext";
static const char name_etext[] = "_etext";

// Looks _stext and _etext up (bpf_kallsyms_lookup_name, kernel 5.16): on
// arm64 KASLR places the kernel image anywhere in the vmalloc area, with
// modules and BPF images around it. Returns 0, or the lookup's errno.
SEC("syscall")
int text_bounds(void *ctx)
{
	u64 lo = 0, hi = 0;
	long err = bpf_kallsyms_lookup_name(name_stext, sizeof(name_stext), 0, &lo);
	if (!err)
		err = bpf_kallsyms_lookup_name(name_etext, sizeof(name_etext), 0, &hi);
	bounds.stext = lo;
	bounds.etext = hi;
	return err;
}
