# deep.py: a recursion 600 frames deep, busy at its bottom, until SIGUSR1.
# usage: deep.py [DEPTH [BOTTOM_FILE]]: BOTTOM_FILE is created once the
# bottom is reached.
import signal, sys
running = True
def deep(n):
    if n == 0:
        if len(sys.argv) > 2:
            open(sys.argv[2], "w").close()
        while running: pass
        return 0
    return deep(n - 1) + 1


def stop(signum, frame):
    global running
    running = False


if __name__ == "__main__":
    sys.setrecursionlimit(5000)
    signal.signal(signal.SIGUSR1, stop)
    deep(int(sys.argv[1]) if len(sys.argv) > 1 else 600)
