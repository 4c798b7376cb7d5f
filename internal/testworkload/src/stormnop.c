// stormnop lives ARGV[1] milliseconds and exits: the exec storm's process.
// Built stripped it has no symbol to instrument; built with -DWITH_SCOPE and
// symbols it has storm_scope, so a replacement in place can be told apart.
#include <stdlib.h>
#include <time.h>

#ifdef WITH_SCOPE
__attribute__((noinline)) void storm_scope(void) {
	__asm__ volatile("" ::: "memory");
}
#endif

int main(int argc, char **argv) {
	int ms = argc > 1 ? atoi(argv[1]) : 0;
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
#ifdef WITH_SCOPE
	storm_scope();
#endif
	return 0;
}
