// libccalls calls its own short_call and libc's getppid N times each, as
// soon as it starts, then exits, printing "calls N". Built against musl or
// statically, it shows probes on a program's code and on its libc's.
//
// usage: libccalls N
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) void short_call(int i) {
	for (int k = 0; k < 100; k++)
		sink += (unsigned long)i * k;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 20;
	for (int i = 0; i < n; i++) {
		short_call(i);
		sink += (unsigned long)getppid();
	}
	printf("calls %d\n", n);
	return 0;
}
