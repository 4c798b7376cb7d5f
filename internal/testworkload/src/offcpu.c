// Off-CPU workload: one thread sleeps 20 ms in nanosleep 100 times, another
// blocks on a pipe read until the main thread writes, every 200 ms, 10
// times. It starts when a line arrives on stdin and, at the end, prints
// each thread's id and the time it spent blocked, measured around each
// blocking call with clock_gettime:
//   sleeper <tid> <ns>
//   reader <tid> <ns>
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SLEEPS 100
#define SLEEP_NS 20000000L
#define WRITES 10
#define WRITE_GAP_NS 200000000L

static int pipefd[2];

struct result {
	pid_t tid;
	long long blocked_ns;
};

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) static void do_sleep(void)
{
	struct timespec ts = {0, SLEEP_NS};
	while (nanosleep(&ts, &ts) != 0)
		;
}

__attribute__((noinline)) static void *sleeper(void *arg)
{
	struct result *r = arg;
	r->tid = gettid();
	for (int i = 0; i < SLEEPS; i++) {
		long long t0 = now_ns();
		do_sleep();
		r->blocked_ns += now_ns() - t0;
	}
	return NULL;
}

__attribute__((noinline)) static int wait_pipe(char *c)
{
	return read(pipefd[0], c, 1);
}

__attribute__((noinline)) static void *reader(void *arg)
{
	struct result *r = arg;
	r->tid = gettid();
	for (;;) {
		char c;
		long long t0 = now_ns();
		int n = wait_pipe(&c);
		r->blocked_ns += now_ns() - t0;
		if (n != 1 || c == 'q')
			return NULL;
	}
}

int main(void)
{
	// Wake every 10 ms until the start line arrives: a profiler learns of
	// the process from its (off-CPU) samples before the measured part.
	struct pollfd in = {.fd = 0, .events = POLLIN};
	while (poll(&in, 1, 10) == 0)
		;
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	if (pipe(pipefd))
		return 1;
	struct result rs = {0}, rr = {0};
	pthread_t ts, tr;
	pthread_create(&ts, NULL, sleeper, &rs);
	pthread_create(&tr, NULL, reader, &rr);
	for (int i = 0; i < WRITES; i++) {
		struct timespec gap = {0, WRITE_GAP_NS};
		nanosleep(&gap, NULL);
		if (write(pipefd[1], i == WRITES - 1 ? "q" : "x", 1) != 1)
			return 1;
	}
	pthread_join(ts, NULL);
	pthread_join(tr, NULL);
	printf("sleeper %d %lld\nreader %d %lld\n", rs.tid, rs.blocked_ns, rr.tid, rr.blocked_ns);
	fflush(stdout);
	// Stay alive until told, so the process is still there to be named.
	fgets(line, sizeof(line), stdin);
	return 0;
}
