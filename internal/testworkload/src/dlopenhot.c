// Loads a library long after start, then spends its time in it:
// main -> call_lib -> [dlopen'd] lib_outer -> lib_hot. Before that it spins
// in wait_spin for argv[2] seconds. With argv[3] "callback", the library
// calls back into this program, which spends its time there instead:
// main -> call_lib -> [dlopen'd] lib_calls_back -> main_hot. Built without
// frame pointers.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned long sink;

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void wait_spin(double seconds) {
	double end = now() + seconds;
	while (now() < end)
		sink++;
}

__attribute__((noinline)) unsigned long main_hot(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < 1000000; i++)
		x = x * 2862933555777941757UL + 3037000493UL;
	return x;
}

__attribute__((noinline)) unsigned long call_lib(unsigned long (*fn)(unsigned long), unsigned long n) {
	unsigned long r = fn(n);
	sink = r;
	return r + 1;
}

int main(int argc, char **argv) {
	if (argc < 3)
		return 2;
	wait_spin(atof(argv[2]));
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	int callback = argc > 3 && strcmp(argv[3], "callback") == 0;
	unsigned long (*fn)(unsigned long) =
	    (unsigned long (*)(unsigned long))dlsym(h, callback ? "lib_calls_back" : "lib_outer");
	if (!fn)
		return 1;
	if (callback) {
		void (*set)(unsigned long (*)(unsigned long)) =
		    (void (*)(unsigned long (*)(unsigned long)))dlsym(h, "lib_set_callback");
		if (!set)
			return 1;
		set(main_hot);
	}
	for (unsigned long i = 0;; i++)
		sink = call_lib(fn, i);
}
