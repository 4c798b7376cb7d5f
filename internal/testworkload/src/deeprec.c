// deeprec calls rec(DEPTH) for each DEPTH given, one after another on the
// main thread: rec recurses DEPTH times (no tail call: it works after the
// inner call returns), so a probe on rec with exit: return sees DEPTH+1
// nested entries; the innermost rec calls leaf once. The kernel keeps at most 64 return probes pending per
// thread (MAX_URETPROBE_DEPTH): deeper calls return unseen. It prints one
// line per outermost call, with CLOCK_MONOTONIC around it:
//   call DEPTH START_NS END_NS
//
// usage: deeprec DEPTH...
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) void leaf(void) {
	sink++;
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void rec(int n) {
	if (n > 0)
		rec(n - 1);
	else
		leaf();
	sink += n;
	__asm__ volatile("" ::: "memory");
}

static unsigned long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		int depth = atoi(argv[i]);
		unsigned long long start = now_ns();
		rec(depth);
		unsigned long long end = now_ns();
		printf("call %d %llu %llu\n", depth, start, end);
	}
	return 0;
}
