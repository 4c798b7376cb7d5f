// execloop runs PROGRAM over and over, one process after the other (vfork,
// exec, wait), for SECONDS, then prints how many it ran.
//
// usage: execloop SECONDS PROGRAM
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	if (argc < 3)
		return 2;
	double end = now() + atof(argv[1]);
	long n = 0;
	do {
		pid_t pid = vfork();
		if (pid < 0) {
			perror("vfork");
			return 1;
		}
		if (pid == 0) {
			execl(argv[2], argv[2], (char *)NULL);
			_exit(127);
		}
		int status;
		if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "child %d failed\n", (int)pid);
			return 1;
		}
		n++;
	} while ((n & 15) != 0 || now() < end);
	printf("%ld\n", n);
	return 0;
}
