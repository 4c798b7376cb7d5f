// C through a libc callback: main -> sort_loop -> qsort (libc, no frame
// pointers) -> ... -> cmp, where the time goes.
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) int cmp(const void *a, const void *b) {
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
	// Burn a little in the comparator so it is the leaf of most samples.
	for (int i = 0; i < 200; i++)
		x = x * 6364136223846793005UL + 1, y = y * 6364136223846793005UL + 1;
	sink = x ^ y;
	return *(const unsigned long *)a < *(const unsigned long *)b ? -1 : *(const unsigned long *)a > *(const unsigned long *)b;
}

__attribute__((noinline)) void sort_loop(unsigned long *v, size_t n) {
	for (unsigned long seed = 1;; seed++) {
		for (size_t i = 0; i < n; i++)
			v[i] = (seed * 2654435761UL + i * 40503UL) % 100003;
		qsort(v, n, sizeof(*v), cmp);
		sink = v[0];
	}
}

int main(void) {
	static unsigned long v[4096];
	sort_loop(v, sizeof(v) / sizeof(v[0]));
}
