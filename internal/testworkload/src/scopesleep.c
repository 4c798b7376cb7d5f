// scopesleep calls scoped_sleep, which sleeps a known time and sometimes
// calls itself, from the main thread and from a second thread, and logs its
// own CLOCK_MONOTONIC measure of every outermost call, so a scope probe on
// scoped_sleep can be checked one record for one call.
//
// usage: scopesleep START_FILE OUT_FILE ROUNDS [CALIBRATION_CALLS]
//
// It waits for START_FILE to exist (the test creates it once the probes are
// attached), then runs ROUNDS rounds of every (sleep ms, depth) pair on both
// threads and writes one line per outermost call to OUT_FILE:
//   call TID IS_MAIN MS DEPTH START_NS END_NS RUN_DELAY_NS INVOLUNTARY INNER_DELAY_NS
// RUN_DELAY_NS and INVOLUNTARY are how long the thread waited on a run queue
// and how often it was preempted during the call (from schedstat and
// getrusage, read outside the timed window): stalls that are not the
// probes' cost. INNER_DELAY_NS is the part of RUN_DELAY_NS inside the
// outermost scoped_sleep itself (read first and last thing in it, so
// inside a probe's scope): a wait there lengthens both the workload's
// measure and the scope alike, while the rest, between the clock reads
// and the function's entry and return, is all that can move them apart.
// Each thread first calls probe_cost once, so the one-time setup of uprobes
// in a process and thread (the kernel's XOL area, per-thread state) is not
// charged to the first measured call. With CALIBRATION_CALLS it then times
// that many calls of probe_cost, each right after a 1 ms sleep like the
// scoped calls, writes "cost NS" for each, then
// "calibration CALLS MEDIAN_NS MAX_NS".
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static const int sleeps_ms[] = {1, 5, 20};
static const int depths[] = {0, 1, 2};
static int rounds;
static FILE *out;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long sink;
// The outermost scoped_sleep's run-queue wait, measured inside it.
static __thread int level;
static __thread unsigned long long inner_delay0, inner_delay;

static unsigned long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

// run_delay returns the calling thread's total run-queue wait in ns.
static unsigned long long run_delay(void) {
	char buf[128];
	unsigned long long on_cpu = 0, delay = 0;
	int fd = open("/proc/thread-self/schedstat", O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	sscanf(buf, "%llu %llu", &on_cpu, &delay);
	return delay;
}

static long involuntary(void) {
	struct rusage ru;
	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_nivcsw;
}

// scoped_sleep sleeps ms, then recurses depth more times: each nested call
// sleeps ms too, so an outermost call lasts about ms * (depth + 1).
NOINLINE void scoped_sleep(int ms, int depth) {
	if (level++ == 0)
		inner_delay0 = run_delay();
	struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
	nanosleep(&ts, NULL);
	if (depth > 0)
		scoped_sleep(ms, depth - 1);
	sink++;
	if (--level == 0)
		inner_delay = run_delay() - inner_delay0;
}

NOINLINE void probe_cost(void) {
	__asm__ volatile("" ::: "memory");
}

static void run(int is_main) {
	pid_t tid = (pid_t)syscall(SYS_gettid);
	probe_cost();
	for (int r = 0; r < rounds; r++) {
		for (unsigned i = 0; i < sizeof(sleeps_ms) / sizeof(sleeps_ms[0]); i++) {
			for (unsigned d = 0; d < sizeof(depths) / sizeof(depths[0]); d++) {
				unsigned long long delay0 = run_delay();
				long inv0 = involuntary();
				unsigned long long start = now_ns();
				scoped_sleep(sleeps_ms[i], depths[d]);
				unsigned long long end = now_ns();
				long inv = involuntary() - inv0;
				unsigned long long delay = run_delay() - delay0;
				pthread_mutex_lock(&out_lock);
				fprintf(out, "call %d %d %d %d %llu %llu %llu %ld %llu\n", tid, is_main, sleeps_ms[i], depths[d], start, end, delay, inv, inner_delay);
				pthread_mutex_unlock(&out_lock);
			}
		}
	}
}

static int cmp_u64(const void *a, const void *b) {
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
	return x < y ? -1 : x > y;
}

static void *worker(void *arg) {
	(void)arg;
	run(0);
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: %s START_FILE OUT_FILE ROUNDS [CALIBRATION_CALLS]\n", argv[0]);
		return 2;
	}
	rounds = atoi(argv[3]);
	struct stat st;
	while (stat(argv[1], &st) != 0)
		usleep(1000);
	out = fopen(argv[2], "w");
	if (!out) {
		perror("fopen");
		return 1;
	}
	// One thread at a time: on a small machine a concurrent sibling's
	// wakeups would land inside the other's measured calls.
	pthread_t th;
	pthread_create(&th, NULL, worker, NULL);
	pthread_join(th, NULL);
	run(1);
	if (argc > 4) {
		int calls = atoi(argv[4]);
		unsigned long long *cost = calloc(calls, sizeof(*cost));
		struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000L};
		probe_cost();
		for (int i = 0; i < calls; i++) {
			nanosleep(&ms, NULL);
			unsigned long long start = now_ns();
			probe_cost();
			cost[i] = now_ns() - start;
		}
		qsort(cost, calls, sizeof(*cost), cmp_u64);
		for (int i = 0; i < calls; i++)
			fprintf(out, "cost %llu\n", cost[i]);
		fprintf(out, "calibration %d %llu %llu\n", calls, cost[calls / 2], cost[calls - 1]);
		free(cost);
	}
	fprintf(out, "done\n");
	fclose(out);
	return 0;
}
