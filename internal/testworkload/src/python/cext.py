# cext.py: Python calling C extensions, until SIGUSR1: zlib compressing
# (C code under Python), and sorted() calling back into Python (Python
# under C code under Python). Tests read the line numbers.
import signal, sys, zlib
running = True
def compress_block(data):
    return zlib.compress(data, 9)
def key_of(x):
    return -x
def sort_block(items):
    return sorted(items, key=key_of)
def outer(data, items):
    compress_block(data)
    sort_block(items)


def stop(signum, frame):
    global running
    running = False


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, stop)
    data = bytes((i * 7919 >> 3) & 0xff for i in range(1 << 18))
    items = list(range(20000))
    while running:
        outer(data, items)
