// tsdkeys: creates pthread keys in both of glibc's key blocks, gives each
// a value in two threads, and prints, per thread, its thread pointer and
// every key with its value, then waits to be read.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define NKEYS 70

static pthread_key_t keys[NKEYS];
static pthread_barrier_t printed;

static void report(uintptr_t salt)
{
	for (int i = 0; i < NKEYS; i++)
		pthread_setspecific(keys[i], (void *)(salt + 16 * (uintptr_t)i));
	uintptr_t tp;
	__asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
	flockfile(stdout);
	printf("thread %lx", (unsigned long)tp);
	for (int i = 0; i < NKEYS; i++)
		printf(" %u=%lx", keys[i], (unsigned long)pthread_getspecific(keys[i]));
	printf("\n");
	fflush(stdout);
	funlockfile(stdout);
}

static void *second(void *arg)
{
	report(0x200000);
	pthread_barrier_wait(&printed);
	pause();
	return arg;
}

int main(void)
{
	for (int i = 0; i < NKEYS; i++)
		pthread_key_create(&keys[i], 0);
	pthread_barrier_init(&printed, 0, 2);
	pthread_t t;
	pthread_create(&t, 0, second, 0);
	pthread_barrier_wait(&printed);
	report(0x100000);
	printf("done\n");
	fflush(stdout);
	pause();
	return 0;
}
