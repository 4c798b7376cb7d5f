// dlopener loads a library with dlopen after DELAY_MS, then calls its
// lib_call every millisecond, CALLS times, and writes to OUT_FILE:
//   dlopen START_NS END_NS
//   call START_NS            (one per call, CLOCK_MONOTONIC)
//   code HEX                 (lib_call's first 16 bytes after the calls:
//                            an int3 (cc) shows a uprobe in this process)
//   done
// so a test can tell which calls came how long after the library was mapped.
//
// usage: dlopener LIBRARY DELAY_MS CALLS OUT_FILE
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static unsigned long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv) {
	if (argc != 5) {
		fprintf(stderr, "usage: dlopener LIBRARY DELAY_MS CALLS OUT_FILE\n");
		return 2;
	}
	int delay_ms = atoi(argv[2]), calls = atoi(argv[3]);
	unsigned long long *at = calloc(calls, sizeof(*at));
	usleep(delay_ms * 1000);
	unsigned long long t0 = now_ns();
	void *h = dlopen(argv[1], RTLD_NOW);
	unsigned long long t1 = now_ns();
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	int (*call)(int) = (int (*)(int))dlsym(h, "lib_call");
	if (!call) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	for (int i = 0; i < calls; i++) {
		at[i] = now_ns();
		call(i);
		// Every millisecond from the first call: sleep to the next tick.
		unsigned long long next = t1 + (unsigned long long)(i + 1) * 1000000ULL, now = now_ns();
		if (next > now)
			usleep((next - now) / 1000);
	}
	FILE *out = fopen(argv[4], "w");
	if (!out)
		return 1;
	fprintf(out, "dlopen %llu %llu\n", t0, t1);
	for (int i = 0; i < calls; i++)
		fprintf(out, "call %llu\n", at[i]);
	fprintf(out, "code ");
	for (int i = 0; i < 16; i++)
		fprintf(out, "%02x", ((const unsigned char *)call)[i]);
	fprintf(out, "\n");
	fprintf(out, "done\n");
	fclose(out);
	return 0;
}
