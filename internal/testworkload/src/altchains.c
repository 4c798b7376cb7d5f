// One thread that alternates between two chains into the same leaf:
// main -> wide -> hot, where wide keeps about 1 KB of stack, and
// main -> narrow -> hot, where narrow keeps a few words. A sample in one
// finds, at the stack addresses its frames use, what the other chain
// left there. Built without frame pointers.
#include <string.h>

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long hot(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < 300000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

#define CALLER(name, words)                                      \
	__attribute__((noinline)) unsigned long name(unsigned long n) { \
		volatile unsigned long pad[words];                       \
		memset((void *)pad, (int)n, sizeof(pad));                \
		unsigned long r = hot(n + pad[words - 1]);               \
		sink = r;                                                \
		return r + pad[0];                                       \
	}

CALLER(wide, 128)
CALLER(narrow, 2)

int main(void) {
	for (unsigned long i = 0;; i++)
		sink = i & 1 ? wide(i) : narrow(i);
}
