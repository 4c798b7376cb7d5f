// Workload for the DWARF tests: static inline helpers that -O2 folds into
// their callers, nested two and three deep, so every address has an inline
// chain to check against llvm-symbolizer.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile unsigned long sink;

static inline unsigned long rotl(unsigned long x, int r) { return (x << r) | (x >> (64 - r)); }

static inline unsigned long mix(unsigned long a, unsigned long b) {
	a ^= rotl(b, 13);
	a *= 0x9e3779b97f4a7c15UL;
	return a ^ (a >> 29);
}

static inline unsigned long hash_bytes(const unsigned char *p, size_t n) {
	unsigned long h = 1469598103934665603UL;
	for (size_t i = 0; i < n; i++) {
		h = mix(h, p[i]);
	}
	return h;
}

struct table {
	unsigned long slots[256];
};

static inline void table_put(struct table *t, const char *key) {
	unsigned long h = hash_bytes((const unsigned char *)key, strlen(key));
	t->slots[h & 255] += h;
}

__attribute__((noinline)) unsigned long fill(struct table *t, int rounds) {
	char buf[32];
	for (int i = 0; i < rounds; i++) {
		snprintf(buf, sizeof buf, "key-%d", i);
		table_put(t, buf);
	}
	unsigned long acc = 0;
	for (int i = 0; i < 256; i++) {
		acc = mix(acc, t->slots[i]);
	}
	return acc;
}

__attribute__((noinline)) static unsigned long sort_and_sum(unsigned long *v, int n) {
	for (int i = 1; i < n; i++) {
		unsigned long x = v[i];
		int j = i - 1;
		while (j >= 0 && v[j] > x) {
			v[j + 1] = v[j];
			j--;
		}
		v[j + 1] = x;
	}
	unsigned long s = 0;
	for (int i = 0; i < n; i++) {
		s = mix(s, v[i]);
	}
	return s;
}

int main(int argc, char **argv) {
	struct table *t = calloc(1, sizeof *t);
	int loops = argc > 1 && strcmp(argv[1], "spin") == 0 ? -1 : 3;
	for (int l = 0; l != loops; l++) {
		sink += fill(t, 20000);
		sink += sort_and_sum(t->slots, 256);
	}
	printf("%lu\n", sink);
	free(t);
	return 0;
}
