// A known deep chain, built by the tests with -O2 -fomit-frame-pointer
// (and once with only .debug_frame).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static unsigned long leaf(unsigned long x) {
	volatile unsigned long acc = x;
	for (int i = 0; i < 1000; i++) acc = acc * 6364136223846793005UL + 1442695040888963407UL;
	return acc;
}

__attribute__((noinline)) static unsigned long c3(unsigned long x) {
	char buf[5000]; // a large frame: a big CFA offset
	memset(buf, (int)x, sizeof buf);
	return leaf(x + (unsigned char)buf[x % sizeof buf]) + 3;
}

__attribute__((noinline)) static unsigned long c2(unsigned long x, int n) {
	unsigned long *v = __builtin_alloca(n * sizeof *v); // a CFA from RBP
	for (int i = 0; i < n; i++) v[i] = c3(x + i);
	return v[n - 1] + 2;
}

__attribute__((noinline)) static int cmp(const void *a, const void *b) {
	unsigned long x = leaf(*(const unsigned long *)a), y = leaf(*(const unsigned long *)b);
	return x < y ? -1 : x > y;
}

__attribute__((noinline)) static unsigned long c1(unsigned long x) {
	unsigned long v[8];
	for (int i = 0; i < 8; i++) v[i] = c2(x, i + 1);
	qsort(v, 8, sizeof v[0], cmp);
	return v[0] + 1;
}

int main(int argc, char **argv) {
	unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1;
	unsigned long s = 0;
	for (unsigned long i = 0; i < n; i++) s += c1(i);
	printf("%lu\n", s);
	return 0;
}
