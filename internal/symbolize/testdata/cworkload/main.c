// Workload for the symbolize tests: a few functions of different kinds
// (global, static, weak alias), and a spin mode that prints the runtime
// addresses of its functions so a test can map them back through
// /proc/PID/maps.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile unsigned long sink;

__attribute__((noinline)) unsigned long leaf_add(unsigned long a, unsigned long b) {
	sink += a;
	return a * 31 + b;
}

__attribute__((noinline)) static unsigned long static_mix(unsigned long x) {
	for (int i = 0; i < 16; i++) {
		x = leaf_add(x, (unsigned long)i) ^ (x >> 3);
	}
	return x;
}

__attribute__((noinline)) unsigned long global_work(unsigned long n) {
	unsigned long acc = 0;
	for (unsigned long i = 0; i < n; i++) {
		acc += static_mix(i);
	}
	return acc;
}

// A weak alias sharing global_work's address: the symbolizer must pick the
// global name.
unsigned long weak_work_alias(unsigned long n) __attribute__((weak, alias("global_work")));

__attribute__((noinline)) unsigned long recurse(unsigned long depth) {
	if (depth == 0) {
		return global_work(64);
	}
	return recurse(depth - 1) + depth;
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "spin") == 0) {
		printf("leaf_add %p\n", (void *)leaf_add);
		printf("static_mix %p\n", (void *)static_mix);
		printf("global_work %p\n", (void *)global_work);
		printf("recurse %p\n", (void *)recurse);
		printf("main %p\n", (void *)main);
		printf("ready\n");
		fflush(stdout);
		for (;;) {
			sink += recurse(8);
			usleep(1000);
		}
	}
	printf("%lu\n", recurse(argc));
	return 0;
}
