// Workload for the DWARF and demangling tests: namespaces, class and
// function templates, lambdas and the standard library, all inlined at -O2.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace bpfcol {
namespace work {

template <typename T>
class Accumulator {
public:
	void add(const T &v) { total_ += weigh(v); items_.push_back(v); }
	T total() const { return total_; }
	std::size_t size() const { return items_.size(); }

private:
	static T weigh(const T &v) { return v * 3 + 1; }
	T total_{};
	std::vector<T> items_;
};

template <typename K, typename V>
__attribute__((noinline)) V sum_values(const std::map<K, V> &m) {
	V s{};
	for (const auto &kv : m) {
		s += kv.second;
	}
	return s;
}

struct Counter {
	std::map<std::string, long> counts;
	__attribute__((noinline)) void count(const std::string &word) { counts[word]++; }
};

__attribute__((noinline)) long crunch(int n) {
	Accumulator<long> acc;
	Counter c;
	std::vector<int> v;
	for (int i = 0; i < n; i++) {
		v.push_back((i * 7919) % 1000);
		acc.add(i);
		c.count("w" + std::to_string(i % 97));
	}
	std::sort(v.begin(), v.end(), [](int a, int b) { return a > b; });
	long s = std::count_if(v.begin(), v.end(), [](int x) { return x % 3 == 0; });
	return s + acc.total() + sum_values(c.counts) + static_cast<long>(acc.size());
}

} // namespace work
} // namespace bpfcol

int main(int argc, char **argv) {
	volatile long sink = 0;
	int loops = argc > 1 && std::strcmp(argv[1], "spin") == 0 ? -1 : 2;
	for (int l = 0; l != loops; l++) {
		sink = sink + bpfcol::work::crunch(20000);
	}
	std::printf("%ld\n", static_cast<long>(sink));
	return 0;
}
