// C++ with exceptions and templates: 'zPLR' CIEs with personality and LSDA.
#include <cstdio>
#include <stdexcept>
#include <vector>

template <int N> __attribute__((noinline)) long deep(long x) {
	std::vector<long> v(N, x);
	if (x < 0) throw std::runtime_error("negative");
	return deep<N - 1>(x + v.back()) + 1;
}
template <> __attribute__((noinline)) long deep<0>(long x) {
	if (x == 42) throw std::runtime_error("42");
	return x;
}

int main(int argc, char **) {
	long s = 0;
	for (long i = 0; i < argc * 1000; i++) {
		try {
			s += deep<6>(i - 1);
		} catch (const std::exception &e) {
			s -= 1;
		}
	}
	std::printf("%ld\n", s);
}
