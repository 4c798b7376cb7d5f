// ctrhog runs as a container's process: it burns CPU in main -> middle ->
// leaf and in a function it writes into anonymous executable memory
// itself, named only by its perf map (/tmp/perf-PID.map with its own pid,
// as a JIT writes it, inside its own root), and calls ctr_call every
// millisecond for a uprobe. It runs until killed.
//
// usage: ctrhog
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long leaf(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < 200000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) unsigned long middle(unsigned long n) {
	unsigned long r = leaf(n);
	sink = r;
	return r + sink;
}

__attribute__((noinline)) void ctr_call(int i) {
	sink += (unsigned long)i;
	__asm__ volatile("" ::: "memory");
}

// The JIT's code: a frame, a countdown loop, return.
static const unsigned char jit_code[] = {
	0x55,                         // push %rbp
	0x48, 0x89, 0xe5,             // mov %rsp,%rbp
	0xb9, 0x00, 0x00, 0x04, 0x00, // mov $0x40000,%ecx
	0xff, 0xc9,                   // 1: dec %ecx
	0x75, 0xfc,                   // jnz 1b
	0x5d,                         // pop %rbp
	0xc3,                         // ret
};

int main(void) {
	void *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	memcpy(code, jit_code, sizeof(jit_code));
	if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0)
		return 1;
	char path[64];
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", getpid());
	FILE *m = fopen(path, "w");
	if (!m)
		return 1;
	fprintf(m, "%lx %zx jit_hot\n", (unsigned long)code, sizeof(jit_code));
	fclose(m);
	void (*jit)(void) = (void (*)(void))code;
	struct timespec last = {0}, now;
	for (unsigned long i = 0;; i++) {
		sink = middle(i);
		jit();
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - last.tv_sec) * 1000000000L + (now.tv_nsec - last.tv_nsec) >= 1000000L) {
			ctr_call((int)i);
			last = now;
		}
	}
}
