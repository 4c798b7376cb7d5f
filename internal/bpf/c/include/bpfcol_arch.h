/* The registers and kernel fields that differ between the architectures
 * bpfcol's BPF is built for, x86-64 and arm64 (bpf2go defines
 * __TARGET_ARCH_x86 or __TARGET_ARCH_arm64): the register frame saved on
 * kernel entry, read through CO-RE, and the thread pointer. Everything
 * else names them through the macros below. */
#ifndef BPFCOL_ARCH_H
#define BPFCOL_ARCH_H

#if defined(__TARGET_ARCH_x86)

/* x86-64 register frame saved on kernel entry. */
struct pt_regs {
	unsigned long r15;
	unsigned long r14;
	unsigned long r13;
	unsigned long r12;
	unsigned long bp;
	unsigned long bx;
	unsigned long r11;
	unsigned long r10;
	unsigned long r9;
	unsigned long r8;
	unsigned long ax;
	unsigned long cx;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long cs;
	unsigned long flags;
	unsigned long sp;
	unsigned long ss;
} __attribute__((preserve_access_index));

/* The thread pointer: the saved FS base, which glibc sets once per
 * thread. */
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));
#define THREAD_POINTER(thread) ((thread).fsbase)

#define REGS_PC(r) ((r)->ip)
#define REGS_SP(r) ((r)->sp)
#define REGS_FP(r) ((r)->bp)
/* Whether the frame was saved in user mode: the CPL in CS. */
#define REGS_USER_MODE(r) ((r)->cs & 3)
/* Go's ABIInternal keeps the running goroutine's g in R14. */
#define REGS_GO_G(r) ((r)->r14)
/* HotSpot's template interpreter keeps the bytecode pointer in R13. */
#define REGS_HOTSPOT_BCP(r) ((r)->r13)
/* A system call's number and its arguments 3 and 5, as saved at entry. */
#define REGS_SYSCALL_NR(r) BPF_CORE_READ(r, orig_ax)
#define REGS_SYSCALL_ARG3(r) BPF_CORE_READ(r, dx)
#define REGS_SYSCALL_ARG5(r) BPF_CORE_READ(r, r8)
#define NR_MMAP 9

#elif defined(__TARGET_ARCH_arm64)

/* arm64 register frame saved on kernel entry: x0-x30, sp, pc, pstate
 * (struct user_pt_regs, the first member of the kernel's pt_regs). */
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
} __attribute__((preserve_access_index));

struct pt_regs {
	struct user_pt_regs user_regs;
	__u64 orig_x0;
	__s32 syscallno;
} __attribute__((preserve_access_index));

/* The thread pointer: TPIDR_EL0 as saved for the thread. */
struct thread_struct {
	struct {
		unsigned long tp_value;
	} uw;
} __attribute__((preserve_access_index));
#define THREAD_POINTER(thread) ((thread).uw.tp_value)

#define REGS_PC(r) ((r)->user_regs.pc)
#define REGS_SP(r) ((r)->user_regs.sp)
#define REGS_FP(r) ((r)->user_regs.regs[29])
/* Whether the frame was saved in user mode: EL0 in PSTATE.M[3:2]. */
#define REGS_USER_MODE(r) ((((r)->user_regs.pstate) & 0xc) == 0)
/* Go's ABIInternal keeps the running goroutine's g in R28. */
#define REGS_GO_G(r) ((r)->user_regs.regs[28])
/* HotSpot's template interpreter keeps the bytecode pointer in R22. */
#define REGS_HOTSPOT_BCP(r) ((r)->user_regs.regs[22])
#define REGS_SYSCALL_NR(r) BPF_CORE_READ(r, syscallno)
#define REGS_SYSCALL_ARG3(r) BPF_CORE_READ(r, user_regs.regs[2])
#define REGS_SYSCALL_ARG5(r) BPF_CORE_READ(r, user_regs.regs[4])
#define NR_MMAP 222

#else
#error "bpfcol's BPF is built for x86-64 or arm64: define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

#endif /* BPFCOL_ARCH_H */
