// shortcalls calls short_call N times as soon as it starts, then exits:
// a process too short for discovery to attach after it started. It prints
// "calls N" on exit, the ground truth for the records of one run.
//
// usage: shortcalls N
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) void short_call(int i) {
	for (int k = 0; k < 100; k++)
		sink += (unsigned long)i * k;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 20;
	for (int i = 0; i < n; i++)
		short_call(i);
	printf("calls %d\n", n);
	return 0;
}
