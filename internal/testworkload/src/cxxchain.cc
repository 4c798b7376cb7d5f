// C++ without frame pointers, with templates and exceptions:
// main -> guarded -> Level<3>::run -> Level<2>::run -> Level<1>::run ->
// Level<0>::run -> hot. One call in 64 throws through the whole chain and
// is caught in guarded, so the unwinder sees the code paths exceptions
// take as well as the landing pads.
#include <stdexcept>

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long hot(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < 1000000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	if ((n & 63) == 0)
		throw std::runtime_error("every 64th call");
	return x;
}

template <int N> struct Level {
	__attribute__((noinline)) static unsigned long run(unsigned long n) {
		unsigned long r = Level<N - 1>::run(n * 3 + N);
		sink = r;
		return r + N;
	}
};

template <> struct Level<0> {
	__attribute__((noinline)) static unsigned long run(unsigned long n) {
		unsigned long r = hot(n); // not a tail call: Level<0> keeps a frame
		sink = r;
		return r + 1;
	}
};

__attribute__((noinline)) unsigned long guarded(unsigned long n) {
	try {
		return Level<3>::run(n);
	} catch (const std::exception &e) {
		return sink + 1;
	}
}

int main() {
	for (unsigned long i = 0;; i++)
		sink = guarded(i * 4);
}
