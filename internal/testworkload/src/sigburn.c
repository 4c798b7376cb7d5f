// A signal handler that burns CPU: main -> outer -> trigger -> raise (libc)
// -> [kernel delivers SIGUSR1] -> __restore_rt frame -> burn. Unwinding out
// of burn must cross the signal frame back into raise and on to main.
#include <signal.h>
#include <string.h>

static volatile unsigned long sink;

__attribute__((noinline)) void burn(int sig) {
	unsigned long x = (unsigned long)sig;
	for (unsigned long i = 0; i < 20000000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}

__attribute__((noinline)) void trigger(void) {
	raise(SIGUSR1);
	sink++;
}

__attribute__((noinline)) void outer(void) {
	trigger();
	sink++;
}

int main(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = burn;
	sigaction(SIGUSR1, &sa, 0);
	for (;;)
		outer();
}
