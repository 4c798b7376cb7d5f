// fastprobe is the harness of the uprobe placement work: functions whose
// first instruction is known by construction (written in assembly so the
// compiler cannot change them), a USDT pair, and a loop that calls one of
// them and times itself.
//
// usage: fastprobe FUNC CALLS
//
// FUNC is one of the functions below (by symbol name) or "usdt". The program
// calls it CALLS times after one warm-up call (which pays the one-time setup
// of uprobes in a process: the XOL area, per-thread state) and prints
//   calls CALLS ns_per_call NS semaphore BEGIN END
// where NS is measured with CLOCK_MONOTONIC around the loop and BEGIN/END
// are the USDT semaphores (non-zero while a tracer has the probe attached).
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <time.h>

unsigned short bpfcol_begin_semaphore __attribute__((section(".probes"), used));
unsigned short bpfcol_end_semaphore __attribute__((section(".probes"), used));

// Each function returns a value derived from its argument so the loop has a
// dependency chain. The shapes:
//   f_endbr     endbr64; push %rbp ...         what -fcf-protection emits
//   f_push      push %rbp ...                  a classic frame-pointer prologue
//   f_lea       lea; push %rbx ...             a straight-line lea before a push
//   f_nop5      nopl 0(%rax,%rax,1); ...       a patchable (ftrace-style) entry
//   f_leaf_lea  lea; ret                       nothing emulated before the RET
//   f_back      endbr64; lea; push ... a loop jumps back to the lea
//   f_indirect  endbr64; push ... jmp *%rax    an indirect jump in the body
//   f_nop_ret   push; ...; nop; ret            an emulated nop just before RET
//   f_rec       push ... call f_rec ... nop; ret   recursive, nop before RET
//   nop_sled    1024 one-byte nops, never called: attach-time benchmarks
// On arm64 (whose kernel simulates branches and single-steps the rest):
//   f_stp       stp x29, x30, [sp, #-16]! ...  the usual prologue
//   f_b         b 1f; 1: ...                   a simulated first instruction
//   f_nop_ret   stp ...; nop; ret              a nop just before the RET
#if defined(__x86_64__)
__asm__(
	".text\n"
	".globl f_endbr\n.type f_endbr,@function\n.p2align 4\n"
	"f_endbr:\n"
	"	endbr64\n"
	"	push %rbp\n"
	"	mov %rsp,%rbp\n"
	"	lea 1(%rdi),%rax\n"
	"	pop %rbp\n"
	"	ret\n"
	".size f_endbr,.-f_endbr\n"

	".globl f_push\n.type f_push,@function\n.p2align 4\n"
	"f_push:\n"
	"	push %rbp\n"
	"	mov %rsp,%rbp\n"
	"	lea 1(%rdi),%rax\n"
	"	pop %rbp\n"
	"	ret\n"
	".size f_push,.-f_push\n"

	".globl f_lea\n.type f_lea,@function\n.p2align 4\n"
	"f_lea:\n"
	"	lea 1(%rdi),%rax\n"
	"	push %rbx\n"
	"	mov %rax,%rbx\n"
	"	mov %rbx,%rax\n"
	"	pop %rbx\n"
	"	ret\n"
	".size f_lea,.-f_lea\n"

	".globl f_nop5\n.type f_nop5,@function\n.p2align 4\n"
	"f_nop5:\n"
	"	nopl 0x0(%rax,%rax,1)\n"
	"	lea 1(%rdi),%rax\n"
	"	ret\n"
	".size f_nop5,.-f_nop5\n"

	".globl f_leaf_lea\n.type f_leaf_lea,@function\n.p2align 4\n"
	"f_leaf_lea:\n"
	"	lea 1(%rdi),%rax\n"
	"	ret\n"
	".size f_leaf_lea,.-f_leaf_lea\n"

	".globl f_back\n.type f_back,@function\n.p2align 4\n"
	"f_back:\n"
	"	endbr64\n"
	"	mov %rdi,%rax\n"
	"	mov $2,%ecx\n"
	"1:	lea 1(%rax),%rax\n"
	"	push %rbx\n"
	"	pop %rbx\n"
	"	dec %ecx\n"
	"	jnz 1b\n"
	"	ret\n"
	".size f_back,.-f_back\n"

	".globl f_indirect\n.type f_indirect,@function\n.p2align 4\n"
	"f_indirect:\n"
	"	endbr64\n"
	"	push %rbp\n"
	"	lea 2f(%rip),%rax\n"
	"	jmp *%rax\n"
	"2:	lea 1(%rdi),%rax\n"
	"	pop %rbp\n"
	"	ret\n"
	".size f_indirect,.-f_indirect\n"

	".globl f_nop_ret\n.type f_nop_ret,@function\n.p2align 4\n"
	"f_nop_ret:\n"
	"	push %rbp\n"
	"	lea 1(%rdi),%rax\n"
	"	pop %rbp\n"
	"	nop\n"
	"	ret\n"
	".size f_nop_ret,.-f_nop_ret\n"

	".globl f_rec\n.type f_rec,@function\n.p2align 4\n"
	"f_rec:\n"
	"	push %rbp\n"
	"	mov %rdi,%rax\n"
	"	test $1,%rdi\n"
	"	je 1f\n"
	"	dec %rdi\n"
	"	call f_rec\n"
	"1:	pop %rbp\n"
	"	nop\n"
	"	ret\n"
	".size f_rec,.-f_rec\n"

	".globl nop_sled\n.type nop_sled,@function\n.p2align 4\n"
	"nop_sled:\n"
	"	.rept 1024\n"
	"	nop\n"
	"	.endr\n"
	"	ret\n"
	".size nop_sled,.-nop_sled\n");

#elif defined(__aarch64__)
__asm__(
	".text\n"
	".globl f_stp\n.type f_stp,%function\n.p2align 4\n"
	"f_stp:\n"
	"	stp x29, x30, [sp, #-16]!\n"
	"	mov x29, sp\n"
	"	add x0, x0, #1\n"
	"	ldp x29, x30, [sp], #16\n"
	"	ret\n"
	".size f_stp,.-f_stp\n"

	".globl f_b\n.type f_b,%function\n.p2align 4\n"
	"f_b:\n"
	"	b 1f\n"
	"1:	add x0, x0, #1\n"
	"	ret\n"
	".size f_b,.-f_b\n"

	".globl f_nop_ret\n.type f_nop_ret,%function\n.p2align 4\n"
	"f_nop_ret:\n"
	"	stp x29, x30, [sp, #-16]!\n"
	"	mov x29, sp\n"
	"	add x0, x0, #1\n"
	"	ldp x29, x30, [sp], #16\n"
	"	nop\n"
	"	ret\n"
	".size f_nop_ret,.-f_nop_ret\n");

unsigned long f_stp(unsigned long);
unsigned long f_b(unsigned long);
unsigned long f_nop_ret(unsigned long);
#else
#error "fastprobe is written for x86-64 and arm64"
#endif

#if defined(__x86_64__)
unsigned long f_endbr(unsigned long);
unsigned long f_push(unsigned long);
unsigned long f_lea(unsigned long);
unsigned long f_nop5(unsigned long);
unsigned long f_leaf_lea(unsigned long);
unsigned long f_back(unsigned long);
unsigned long f_indirect(unsigned long);
unsigned long f_nop_ret(unsigned long);
unsigned long f_rec(unsigned long);
#endif

// usdt_pair is the USDT row: a begin and an end site around a little work,
// the same work the assembly functions do.
__attribute__((noinline)) unsigned long usdt_pair(unsigned long x) {
	STAP_PROBE1(bpfcol, begin, x);
	__asm__ volatile("" : "+r"(x));
	x++;
	STAP_PROBE1(bpfcol, end, x);
	return x;
}

static const struct {
	const char *name;
	unsigned long (*fn)(unsigned long);
} functions[] = {
#if defined(__x86_64__)
	{"f_endbr", f_endbr},   {"f_push", f_push},       {"f_lea", f_lea},
	{"f_nop5", f_nop5},     {"f_leaf_lea", f_leaf_lea}, {"f_back", f_back},
	{"f_indirect", f_indirect}, {"f_nop_ret", f_nop_ret}, {"f_rec", f_rec},
#else
	{"f_stp", f_stp},       {"f_b", f_b},             {"f_nop_ret", f_nop_ret},
#endif
	{"usdt", usdt_pair},
};

static unsigned long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: %s FUNC CALLS\n", argv[0]);
		return 2;
	}
	unsigned long (*volatile fn)(unsigned long) = NULL;
	for (unsigned i = 0; i < sizeof(functions) / sizeof(functions[0]); i++)
		if (strcmp(argv[1], functions[i].name) == 0)
			fn = functions[i].fn;
	if (!fn) {
		fprintf(stderr, "unknown function %s\n", argv[1]);
		return 2;
	}
	long calls = strtol(argv[2], NULL, 10);
	if (calls <= 0) {
		fprintf(stderr, "bad call count %s\n", argv[2]);
		return 2;
	}
	unsigned long x = fn(0);
	unsigned long long start = now_ns();
	for (long i = 0; i < calls; i++)
		x = fn(x);
	unsigned long long elapsed = now_ns() - start;
	printf("calls %ld ns_per_call %.1f semaphore %u %u sink %lu\n", calls, (double)elapsed / calls,
	       bpfcol_begin_semaphore, bpfcol_end_semaphore, x);
	return 0;
}
