// shortcalls calls short_call N times as soon as it starts, then exits:
// a process too short for discovery to attach after it started. It prints
// "calls N" on exit, the ground truth for the records of one run.
//
// With INTERVAL_US, it calls short_call every INTERVAL_US microseconds
// instead, and prints before "calls N" the CLOCK_MONOTONIC time its main
// began and each call's:
//   start NS
//   call NS        (one per call, in order)
// so a test can tell which calls came how long after the process started.
//
// usage: shortcalls N [INTERVAL_US]
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) void short_call(int i) {
	for (int k = 0; k < 100; k++)
		sink += (unsigned long)i * k;
}

static unsigned long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv) {
	unsigned long long start = now_ns();
	int n = argc > 1 ? atoi(argv[1]) : 20;
	if (argc > 2) {
		long interval = atol(argv[2]);
		unsigned long long *at = calloc(n, sizeof(*at));
		if (!at)
			return 1;
		for (int i = 0; i < n; i++) {
			at[i] = now_ns();
			short_call(i);
			unsigned long long next = start + (unsigned long long)(i + 1) * interval * 1000ULL, now = now_ns();
			if (next > now)
				usleep((next - now) / 1000);
		}
		printf("start %llu\n", start);
		for (int i = 0; i < n; i++)
			printf("call %llu\n", at[i]);
	} else {
		for (int i = 0; i < n; i++)
			short_call(i);
	}
	printf("calls %d\n", n);
	return 0;
}
