// A known deep call chain built without frame pointers
// (-O2 -fomit-frame-pointer): main -> c1 -> ... -> c6 -> hot. Each level
// keeps a different amount of stack, so every frame has its own CFA rule.
#include <string.h>

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long hot(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < 2000000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

#define LEVEL(name, next, words)                                  \
	__attribute__((noinline)) unsigned long name(unsigned long n) { \
		volatile unsigned long pad[words];                        \
		memset((void *)pad, (int)n, sizeof(pad));                 \
		unsigned long r = next(n + pad[words - 1]);               \
		sink = r;                                                 \
		return r + pad[0];                                        \
	}

LEVEL(c6, hot, 3)
LEVEL(c5, c6, 17)
LEVEL(c4, c5, 1)
LEVEL(c3, c4, 40)
LEVEL(c2, c3, 5)
LEVEL(c1, c2, 300)

int main(void) {
	for (unsigned long i = 0;; i++)
		sink = c1(i);
}
