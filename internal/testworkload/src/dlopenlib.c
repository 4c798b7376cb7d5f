// The library dlopenhot.c loads: lib_outer -> lib_hot, and
// lib_calls_back -> the function its loader set.
static volatile unsigned long sink;

__attribute__((noinline)) unsigned long lib_hot(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < 1000000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) unsigned long lib_outer(unsigned long n) {
	unsigned long r = lib_hot(n * 3);
	sink = r;
	return r + 7;
}

static unsigned long (*callback)(unsigned long);

void lib_set_callback(unsigned long (*cb)(unsigned long)) { callback = cb; }

__attribute__((noinline)) unsigned long lib_calls_back(unsigned long n) {
	unsigned long r = callback(n + 1);
	sink = r;
	return r + 5;
}
