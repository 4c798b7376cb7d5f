// clockloop reads clocks in a loop, each through the vDSO: the monotonic
// clock, which the vDSO's clock_gettime reads itself (from read_clock);
// the thread's CPU time, for which it makes the system call (from
// read_cputime); and the time in seconds, from the vDSO's time, a
// function that keeps no frame pointer (from read_time).
#include <time.h>

volatile long sink;

__attribute__((noinline)) long read_clock(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_nsec;
}

__attribute__((noinline)) long read_cputime(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_nsec;
}

__attribute__((noinline)) long read_time(void) {
	long t = 0;
	for (int i = 0; i < 512; i++)
		t += time(NULL);
	return t;
}

int main(void) {
	for (;;)
		sink += read_clock() + read_cputime() + read_time();
}
