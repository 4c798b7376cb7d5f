// readzero spends its time in the kernel's read path: read(2) from
// /dev/zero in a loop, so kernel stacks show ksys_read/vfs_read.
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 0;
	static char buf[1 << 16];
	int fd = open("/dev/zero", O_RDONLY);
	if (fd < 0)
		return 1;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (unsigned long i = 0;; i++) {
		if (read(fd, buf, sizeof(buf)) < 0)
			return 1;
		if (seconds > 0 && (i & 255) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds)
				return 0;
		}
	}
}
