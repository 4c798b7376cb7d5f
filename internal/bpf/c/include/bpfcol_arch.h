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

/* The highest user address (47-bit virtual addresses). */
#define MAX_USER_ADDR 0x00007fffffffffffULL
/* No link register: a call pushes the return address (UNWIND_RA_IN_LINK
 * never appears in x86-64's rows). */
#define HAS_LINK_REGISTER 0
#define REGS_LR(r) 0
/* A saved return address as read: x86-64 signs none. */
#define RA_STRIP(ra) (ra)
/* Where, in the ucontext at SP that a signal handler returns through
 * (__restore_rt), the interrupted registers are: uc_mcontext at 40, its
 * gregs in REG_* order. */
#define UC_FP (40 + 10 * 8)
#define UC_SP (40 + 15 * 8)
#define UC_PC (40 + 16 * 8)
#define UC_LR 0
/* How far below the SP a frame record may lie: never, a call pushes the
 * return address and then the frame pointer. */
#define FP_BELOW_SP 0
/* What the kernel keys a uretprobe's instance by (its stack): the slot the
 * call pushed the return address into, right under the caller's SP. */
#define URETPROBE_SLOT(caller_sp) ((caller_sp) - 8)

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

/* The highest user address (48-bit virtual addresses, the kernel's
 * default map window even where 52 bits are configured). */
#define MAX_USER_ADDR 0x0000ffffffffffffULL
/* The link register, x30: a leaf's return address stays there. */
#define HAS_LINK_REGISTER 1
#define REGS_LR(r) ((r)->user_regs.regs[30])
/* A saved return address as read, without the pointer authentication
 * code that -mbranch-protection puts in its top bits. */
#define RA_STRIP(ra) ((ra) & MAX_USER_ADDR)
/* Where, in the rt_sigframe at SP that __kernel_rt_sigreturn returns
 * through, the interrupted registers are: its ucontext at 128 (after the
 * siginfo), uc_mcontext at 176 in that, then fault_address and x0-x30,
 * sp, pc. */
#define UC_MCONTEXT (128 + 176)
#define UC_FP (UC_MCONTEXT + 8 + 29 * 8)
#define UC_LR (UC_MCONTEXT + 8 + 30 * 8)
#define UC_SP (UC_MCONTEXT + 8 + 31 * 8)
#define UC_PC (UC_MCONTEXT + 8 + 32 * 8)
/* How far below the SP a frame record may lie: Go keeps its frame record
 * 8 bytes under a function's SP, so a frameless callee's x29 is 8 bytes
 * under its own SP. */
#define FP_BELOW_SP 8
/* What the kernel keys a uretprobe's instance by (its stack): the SP at
 * the probed function's entry, its caller's. */
#define URETPROBE_SLOT(caller_sp) (caller_sp)

#else
#error "bpfcol's BPF is built for x86-64 or arm64: define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

#endif /* BPFCOL_ARCH_H */
