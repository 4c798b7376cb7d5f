// Pipe ping-pong between two processes, each pinned to a CPU of its own:
// every round trip wakes a task on the other CPU, twice. The deterministic
// cross-CPU counterpart of `perf bench sched pipe`, whose tasks the
// scheduler places where it likes. Usage: pingpong LOOPS CPU_A CPU_B. The
// parent runs on CPU_A, its child on CPU_B; the output names the round
// trips and their total time in the words of `perf bench sched pipe`, so
// one parser reads both:
//   # Executed <loops> pipe operations between two processes
//        Total time: <seconds> [sec]
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		perror("sched_setaffinity");
		exit(1);
	}
}

static void xread(int fd, int *v)
{
	if (read(fd, v, sizeof(*v)) != sizeof(*v)) {
		perror("read");
		exit(1);
	}
}

static void xwrite(int fd, const int *v)
{
	if (write(fd, v, sizeof(*v)) != sizeof(*v)) {
		perror("write");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s LOOPS CPU_A CPU_B\n", argv[0]);
		return 2;
	}
	long loops = atol(argv[1]);
	int cpu_a = atoi(argv[2]), cpu_b = atoi(argv[3]);
	int ping[2], pong[2];
	if (loops <= 0 || pipe(ping) || pipe(pong)) {
		fprintf(stderr, "bad loop count or no pipe\n");
		return 2;
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	int v = 0;
	if (child == 0) {
		pin(cpu_b);
		for (long i = 0; i < loops; i++) {
			xread(ping[0], &v);
			xwrite(pong[1], &v);
		}
		return 0;
	}
	pin(cpu_a);
	for (long i = 0; i < loops; i++) {
		xwrite(ping[1], &v);
		xread(pong[0], &v);
	}
	int status;
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "child failed\n");
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("# Executed %ld pipe operations between two processes\n\n", loops);
	printf("     Total time: %.6f [sec]\n", secs);
	return 0;
}
