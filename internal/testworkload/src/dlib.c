// dlib is the library dlopener loads late: lib_call is the probed function.
static volatile unsigned long sink;

__attribute__((noinline)) int lib_call(int i) {
	sink += (unsigned long)i;
	return i;
}
