// clockloop reads the monotonic clock in a loop: its time goes to the
// vDSO's clock_gettime, called from read_clock.
#include <time.h>

volatile long sink;

__attribute__((noinline)) long read_clock(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_nsec;
}

int main(void) {
	for (;;)
		sink += read_clock();
}
