// main -> outer -> mid -> hot, where mid keeps FRAME bytes of stack
// (-DFRAME=N, N a multiple of 16 plus 8, at least 136). Two non-PIE builds
// with other FRAMEs put the same instructions at the same addresses: only
// mid's immediates differ, and with them its CFA rule at the same return
// address. Built without frame pointers.
#define STR2(x) #x
#define STR(x) STR2(x)

static volatile unsigned long sink;

__attribute__((noinline, used)) unsigned long hot(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < 2000000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

unsigned long mid(unsigned long n);

#if defined(__aarch64__)
// arm64: FRAME+8 bytes (SP stays 16-aligned), x30 saved alone at the
// bottom, its offset from the CFA as large as the frame.
__asm__(".text\n"
	".globl mid\n"
	".type mid, %function\n"
	"mid:\n"
	".cfi_startproc\n"
	"sub sp, sp, #(" STR(FRAME) " + 8)\n"
	".cfi_adjust_cfa_offset (" STR(FRAME) " + 8)\n"
	"str x30, [sp]\n"
	".cfi_offset x30, -(" STR(FRAME) " + 8)\n"
	"bl hot\n"
	"ldr x30, [sp]\n"
	".cfi_restore x30\n"
	"add sp, sp, #(" STR(FRAME) " + 8)\n"
	".cfi_adjust_cfa_offset -(" STR(FRAME) " + 8)\n"
	"ret\n"
	".cfi_endproc\n"
	".size mid, .-mid\n");
#else
__asm__(".text\n"
	".globl mid\n"
	".type mid, @function\n"
	"mid:\n"
	".cfi_startproc\n"
	"subq $" STR(FRAME) ", %rsp\n"
	".cfi_adjust_cfa_offset " STR(FRAME) "\n"
	"call hot\n"
	"addq $" STR(FRAME) ", %rsp\n"
	".cfi_adjust_cfa_offset -" STR(FRAME) "\n"
	"ret\n"
	".cfi_endproc\n"
	".size mid, .-mid\n");
#endif

__attribute__((noinline)) unsigned long outer(unsigned long n) {
	unsigned long r = mid(n);
	sink = r;
	return r + 1;
}

int main(void) {
	for (unsigned long i = 0;; i++)
		sink = outer(i);
}
