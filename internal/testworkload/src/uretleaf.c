// A frameless leaf for a uretprobe: leaf pushes one register and keeps no
// frame pointer, so its return address, which a uretprobe replaces with
// the trampoline in [uprobes], sits at SP+8 while it runs. The argument is
// how long to run, in milliseconds.
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline, naked)) uint64_t leaf(uint64_t x)
{
	asm("push %rbx\n\tmov $20000, %ecx\n\tmov %rdi, %rax\n"
	    "1:\timul $1103515245, %rax, %rax\n\tadd $12345, %rax\n\tdec %ecx\n\tjnz 1b\n"
	    "\tpop %rbx\n\tret\n");
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	volatile uint64_t s = 1;
	double end = now() + (argc > 1 ? atof(argv[1]) : 300) / 1e3;
	while (now() < end)
		for (int i = 0; i < 20; i++)
			s += leaf(s);
	return (int)(s & 1) & 0;
}
