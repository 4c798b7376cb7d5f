/* Hand-written CFI in the forms the compiler meets in real binaries,
 * assembled into .eh_frame (or .debug_frame with -DDEBUG_FRAME). The code
 * is never run; only its CFI is read. */
#ifdef DEBUG_FRAME
	.cfi_sections .debug_frame
#endif
	.text

/* remember/restore_state around an early return, with RBP as the CFA. */
	.globl f_state
	.type f_state, @function
f_state:
	.cfi_startproc
	push %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	mov %rsp, %rbp
	.cfi_def_cfa_register %rbp
	test %rdi, %rdi
	jz 1f
	.cfi_remember_state
	leave
	.cfi_def_cfa %rsp, 8
	.cfi_restore %rbp
	ret
1:	.cfi_restore_state
	.skip 300 /* DW_CFA_advance_loc2 */
	.cfi_same_value %rbp
	.skip 70000 /* DW_CFA_advance_loc4 */
	.cfi_offset %rbp, 8 /* DW_CFA_offset_extended_sf */
	nop
	.cfi_def_cfa_offset 100000
	nop
	leave
	.cfi_def_cfa %rsp, 8
	ret
	.cfi_endproc
	.size f_state, .-f_state

/* PLT-like CFA expressions, both thresholds, then an unknown one. */
	.globl f_plt
	.type f_plt, @function
f_plt:
	.cfi_startproc
	nop
	/* DW_CFA_def_cfa_expression: breg7 8; breg16 0; lit15; and; lit10; ge; lit3; shl; plus */
	.cfi_escape 0x0f, 0x0b, 0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3a, 0x2a, 0x33, 0x24, 0x22
	nop
	/* the same with lit11 */
	.cfi_escape 0x0f, 0x0b, 0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22
	nop
	/* DW_CFA_def_cfa_expression: breg7 8; deref */
	.cfi_escape 0x0f, 0x03, 0x77, 0x08, 0x06
	nop
	.cfi_def_cfa %rsp, 8
	/* DW_CFA_GNU_args_size 16 */
	.cfi_escape 0x2e, 0x10
	nop
	ret
	.cfi_endproc
	.size f_plt, .-f_plt

/* RBP restored in ways the unwinder cannot follow; a CFA in r10. */
	.globl f_rbp
	.type f_rbp, @function
f_rbp:
	.cfi_startproc
	push %rbx
	.cfi_def_cfa_offset 16
	.cfi_register %rbp, %rbx
	nop
	/* DW_CFA_val_expression rbp: breg7 0 */
	.cfi_escape 0x16, 0x06, 0x02, 0x77, 0x00
	nop
	/* DW_CFA_expression rbp: breg7 0 */
	.cfi_escape 0x10, 0x06, 0x02, 0x77, 0x00
	nop
	.cfi_val_offset %rbp, -16
	nop
	.cfi_undefined %rbp
	nop
	.cfi_restore %rbp
	lea 8(%rsp), %r10
	.cfi_def_cfa %r10, 0
	nop
	.cfi_def_cfa %rsp, 16
	.cfi_rel_offset %rbp, 0
	pop %rbx
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size f_rbp, .-f_rbp

/* The return address moved or undefined. */
	.globl f_ra
	.type f_ra, @function
f_ra:
	.cfi_startproc
	nop
	.cfi_register %rip, %rdi
	nop
	.cfi_undefined %rip
	nop
	.cfi_offset %rip, -16
	nop
	.cfi_offset %rip, -8
	ret
	.cfi_endproc
	.size f_ra, .-f_ra

/* A signal trampoline, like glibc's __restore_rt. */
	nop
	.globl f_sigreturn
	.type f_sigreturn, @function
	.cfi_startproc simple
	.cfi_signal_frame
	/* DW_CFA_def_cfa_expression: breg7 160; deref */
	.cfi_escape 0x0f, 0x04, 0x77, 0xa0, 0x01, 0x06
f_sigreturn:
	mov $15, %rax
	syscall
	.cfi_endproc
	.size f_sigreturn, .-f_sigreturn

/* A personality and an LSDA: a 'zPLR' CIE. */
	.globl f_pers
	.type f_pers, @function
f_pers:
	.cfi_startproc
	.cfi_personality 0x9b, pers_ref
	.cfi_lsda 0x1b, lsda
	sub $24, %rsp
	.cfi_def_cfa_offset 32
	add $24, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size f_pers, .-f_pers

	.type pers, @function
pers:
	ret
	.size pers, .-pers

	.section .data.rel.local, "aw"
	.align 8
pers_ref:
	.quad pers
	.section .rodata
lsda:
	.byte 0xff, 0xff, 0x01, 0x00
	.section .note.GNU-stack, "", @progbits
