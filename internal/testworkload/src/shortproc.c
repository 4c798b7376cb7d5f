// shortproc forks and execs itself as a short-lived child, one after the
// other: each child burns the CPU in shortproc_child_spin for about 20 ms,
// then exits, so it is gone well before a profiler that reads its samples
// every few hundred milliseconds sees them.
//
// usage: shortproc COUNT       (the parent)
//        shortproc child       (what the parent runs)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

volatile unsigned long sink;

__attribute__((noinline)) void shortproc_child_spin(long long ns) {
	long long end = now_ns() + ns;
	do {
		for (int i = 0; i < 20000; i++)
			sink = sink * 31 + i;
	} while (now_ns() < end);
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "child") == 0) {
		shortproc_child_spin(20 * 1000000LL);
		return 0;
	}
	int count = argc > 1 ? atoi(argv[1]) : 300;
	for (int i = 0; i < count; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			execl(argv[0], argv[0], "child", (char *)NULL);
			perror("execl");
			_exit(127);
		}
		int status;
		if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "child %d failed\n", (int)pid);
			return 1;
		}
	}
	return 0;
}
