// stepcount is an LD_PRELOAD shim counting a process's sqlite3_step calls,
// an independent ground truth for the uprobe records: it forwards each call
// to the real sqlite3_step and writes "steps N" to $STEPCOUNT_OUT at exit.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned long steps;

int sqlite3_step(void *stmt) {
	static int (*real)(void *);
	if (!real) {
		// Python loads libsqlite3 with its extension module, privately
		// (RTLD_LOCAL): RTLD_NEXT would not find it, its handle does.
		void *lib = dlopen("libsqlite3.so.0", RTLD_NOLOAD | RTLD_LAZY);
		if (!lib)
			abort();
		real = (int (*)(void *))dlsym(lib, "sqlite3_step");
		if (!real)
			abort();
	}
	__atomic_add_fetch(&steps, 1, __ATOMIC_RELAXED);
	return real(stmt);
}

__attribute__((destructor)) static void report(void) {
	const char *path = getenv("STEPCOUNT_OUT");
	if (!path)
		return;
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "steps %lu\n", steps);
	fclose(f);
}
