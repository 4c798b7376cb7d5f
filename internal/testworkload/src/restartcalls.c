// restartcalls keeps calls of scoped in flight on two threads, back to
// back, for a test that stops and starts probing meanwhile: scoped sleeps
// MS milliseconds inside itself, so nearly always a call is under way.
//
// usage: restartcalls START_FILE STOP_FILE OUT_FILE ADDR_FILE MS
//
// It writes scoped's address in this process to ADDR_FILE ("fn 0x..."), a
// test can read its first byte to see a uprobe left in place; waits for
// START_FILE; then each thread calls scoped until STOP_FILE exists, and it
// writes one line per call to OUT_FILE, then "done":
//   call TID START_NS END_NS     (CLOCK_MONOTONIC around the call)
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_CALLS 100000

static volatile unsigned long sink;
static const char *stop_file;
static int ms;

struct call {
	int tid;
	unsigned long long start, end;
};

static unsigned long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((noinline)) void scoped(int n) {
	struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)n * 1000000L};
	nanosleep(&ts, NULL);
	sink++;
	__asm__ volatile("" ::: "memory");
}

struct thread {
	pthread_t th;
	struct call *calls;
	int n;
};

static void *run(void *arg) {
	struct thread *t = arg;
	int tid = (int)syscall(SYS_gettid);
	struct stat st;
	while (t->n < MAX_CALLS && stat(stop_file, &st) != 0) {
		unsigned long long start = now_ns();
		scoped(ms);
		t->calls[t->n++] = (struct call){tid, start, now_ns()};
	}
	return NULL;
}

int main(int argc, char **argv) {
	if (argc != 6) {
		fprintf(stderr, "usage: restartcalls START_FILE STOP_FILE OUT_FILE ADDR_FILE MS\n");
		return 2;
	}
	stop_file = argv[2];
	ms = atoi(argv[5]);
	FILE *addr = fopen(argv[4], "w");
	if (!addr)
		return 1;
	fprintf(addr, "fn %p\n", (void *)scoped);
	fclose(addr);
	struct stat st;
	while (stat(argv[1], &st) != 0)
		usleep(1000);
	struct thread t[2];
	for (int i = 0; i < 2; i++) {
		t[i].calls = calloc(MAX_CALLS, sizeof(struct call));
		t[i].n = 0;
		if (!t[i].calls)
			return 1;
	}
	pthread_create(&t[1].th, NULL, run, &t[1]);
	run(&t[0]);
	pthread_join(t[1].th, NULL);
	FILE *out = fopen(argv[3], "w");
	if (!out)
		return 1;
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < t[i].n; k++)
			fprintf(out, "call %d %llu %llu\n", t[i].calls[k].tid, t[i].calls[k].start, t[i].calls[k].end);
	fprintf(out, "done\n");
	fclose(out);
	return 0;
}
