// prologues exercises many function prologue/epilogue shapes (callee-saved
// pushes, large sub rsp frames, shrink-wrapped early returns, alloca and stack
// realignment, jump tables, tail calls, noreturn paths) so unwinders can be
// checked against the compiler's CFI at every instruction.
#include <alloca.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned long sink;

#define NOINLINE __attribute__((noinline))

NOINLINE unsigned long frameless_leaf(unsigned long a, unsigned long b) {
	return a * 31 + (b >> 3);
}

// Keeps many values live across calls, forcing pushes of callee-saved registers.
NOINLINE unsigned long many_saved(unsigned long a, unsigned long b, unsigned long c) {
	unsigned long x = frameless_leaf(a, b);
	unsigned long y = frameless_leaf(b, c);
	unsigned long z = frameless_leaf(c, a);
	unsigned long w = frameless_leaf(x, y);
	unsigned long v = frameless_leaf(y, z);
	return x + y + z + w + v + frameless_leaf(w, v) + a + b + c;
}

// A large local array gives a sub rsp frame.
NOINLINE unsigned long big_frame(unsigned long n) {
	volatile unsigned long buf[300];
	for (unsigned long i = 0; i < 300; i++)
		buf[i] = i * n;
	return buf[n % 300] + frameless_leaf(buf[7], n);
}

// The fast path returns before the prologue (shrink wrapping).
NOINLINE unsigned long early_return(unsigned long n) {
	if (n < 4)
		return n;
	unsigned long r = many_saved(n, n + 1, n + 2);
	sink = r;
	return r + big_frame(n);
}

// alloca forces a frame pointer and a variable rsp.
NOINLINE unsigned long with_alloca(unsigned long n) {
	size_t sz = 16 + (n & 255);
	unsigned char *p = alloca(sz);
	memset(p, (int)n, sz);
	return p[sz / 2] + frameless_leaf(p[0], sz);
}

// Over-aligned locals make gcc realign rsp with and rsp,-64.
NOINLINE unsigned long realigned(unsigned long n) {
	unsigned long buf[8] __attribute__((aligned(64)));
	for (int i = 0; i < 8; i++)
		buf[i] = n + i;
	sink = (unsigned long)buf;
	return buf[n & 7] + frameless_leaf(n, buf[3]);
}

// A dense switch compiles to a jump table (indirect jmp).
NOINLINE unsigned long switchy(unsigned long n) {
	switch (n % 12) {
	case 0: return frameless_leaf(n, 1) + 3;
	case 1: return n * 7;
	case 2: return many_saved(n, 2, 3);
	case 3: return n ^ 0x55;
	case 4: return big_frame(n) + 1;
	case 5: return n << 3;
	case 6: return frameless_leaf(n, 6) * 2;
	case 7: return n - 9;
	case 8: return n / 3;
	case 9: return early_return(n);
	case 10: return n | 1;
	default: return 0;
	}
}

// Ends in a tail call.
NOINLINE unsigned long tail_caller(unsigned long n) {
	sink = n;
	return switchy(n + 1);
}

NOINLINE __attribute__((noreturn)) void die(const char *msg) {
	fputs(msg, stderr);
	abort();
}

// Has a noreturn path in the middle of the function.
NOINLINE unsigned long checked(unsigned long n) {
	if (n == (unsigned long)-1)
		die("bad n\n");
	return many_saved(n, n, n) + 1;
}

NOINLINE unsigned long recursive(unsigned long n) {
	if (n == 0)
		return 1;
	return n + recursive(n - 1) * 3;
}

NOINLINE unsigned long varargs(int count, ...) {
	va_list ap;
	unsigned long s = 0;
	va_start(ap, count);
	for (int i = 0; i < count; i++)
		s += va_arg(ap, unsigned long);
	va_end(ap);
	return s;
}

static jmp_buf env;

NOINLINE unsigned long jumper(unsigned long n) {
	if (setjmp(env))
		return 42;
	if ((n & 1023) == 5)
		longjmp(env, 1);
	return n;
}

// Unlikely paths may be split into a .cold part entered by jmp, not call.
NOINLINE unsigned long cold_split(unsigned long n) {
	if (__builtin_expect(n == 12345, 0)) {
		char msg[64];
		snprintf(msg, sizeof msg, "rare %lu\n", n);
		fputs(msg, stderr);
		return many_saved(n, 1, 2);
	}
	return n + 1;
}

int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 0;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (unsigned long i = 0;; i++) {
		unsigned long s = early_return(i) + with_alloca(i) + realigned(i) + tail_caller(i) +
		                  checked(i) + recursive(i & 15) + varargs(3, i, i + 1, i + 2) + jumper(i) +
		                  cold_split(i);
		sink = s;
		if (seconds > 0 && (i & 255) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds)
				return 0;
		}
	}
}
