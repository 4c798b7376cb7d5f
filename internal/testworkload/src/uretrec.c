// uretrec spins under a recursion and a tail call, for uretprobes on
// every function: main -> tail_a -(tail call)-> tail_b -> rec x8 -> spin.
// tail_a jumps to tail_b, so tail_b's entry finds the trampoline already
// in its return slot (a chained return instance), and rec's eight frames
// each have their own instance.
static volatile unsigned long sink;

__attribute__((noinline)) unsigned long spin(unsigned long n) {
	unsigned long x = n;
	for (int i = 0; i < 200000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) unsigned long rec(unsigned long depth, unsigned long n) {
	unsigned long r = depth ? rec(depth - 1, n + 1) : spin(n);
	sink = r; // not a tail call: each level keeps its frame
	return r + 1;
}

__attribute__((noinline)) unsigned long tail_b(unsigned long n) {
	unsigned long r = rec(7, n);
	sink = r;
	return r;
}

__attribute__((noinline)) unsigned long tail_a(unsigned long n) {
	return tail_b(n * 3);
}

int main(void) {
	for (;;)
		sink = tail_a(sink);
}
