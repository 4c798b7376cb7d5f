#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long leaf(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < 1000000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) unsigned long middle(unsigned long n) {
	unsigned long r = leaf(n);
	sink = r;
	return r + sink;
}

int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 0;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (unsigned long i = 0;; i++) {
		sink = middle(i);
		if (seconds > 0 && (i & 63) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds)
				return 0;
		}
	}
}
