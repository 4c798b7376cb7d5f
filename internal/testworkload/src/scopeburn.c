// scopeburn calls scoped_call, which burns 50 ms of its thread's CPU time
// and then sleeps 50 ms, CALLS times, with 20 ms of sleep and burn between
// calls outside it: a probe on scoped_call should see every sample and
// off-CPU event of the call, and none of those between calls.
//
// usage: scopeburn START_FILE CALLS
//
// It waits for START_FILE to exist (the test creates it once the receivers
// run), then makes the calls and prints one line per call:
//   call START_NS END_NS SLEPT_NS
// CLOCK_MONOTONIC at the call's start and end, and the time its sleep took.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

static unsigned long long clock_ns(clockid_t id) {
	struct timespec ts;
	clock_gettime(id, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

// burn spins until the thread has used ms of CPU time.
NOINLINE static void burn(int ms) {
	unsigned long long end = clock_ns(CLOCK_THREAD_CPUTIME_ID) + ms * 1000000ULL;
	while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int i = 0; i < 1000; i++)
			sink += i;
}

NOINLINE static void nap(int ms) {
	struct timespec ts = { .tv_sec = 0, .tv_nsec = ms * 1000000L };
	nanosleep(&ts, NULL);
}

NOINLINE unsigned long long scoped_call(void) {
	burn(50);
	unsigned long long t0 = clock_ns(CLOCK_MONOTONIC);
	nap(50);
	return clock_ns(CLOCK_MONOTONIC) - t0;
}

NOINLINE static void between_calls(void) {
	burn(10);
	nap(20);
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: scopeburn START_FILE CALLS\n");
		return 2;
	}
	int calls = atoi(argv[2]);
	struct stat st;
	while (stat(argv[1], &st) != 0)
		nap(1);
	for (int i = 0; i < calls; i++) {
		between_calls();
		unsigned long long start = clock_ns(CLOCK_MONOTONIC);
		unsigned long long slept = scoped_call();
		unsigned long long end = clock_ns(CLOCK_MONOTONIC);
		printf("call %llu %llu %llu\n", start, end, slept);
	}
	between_calls();
	fflush(stdout);
	return 0;
}
