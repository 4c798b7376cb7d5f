# crunch.py: a known chain of Python functions hot on known lines.
# Tests read these line numbers: keep every line where it is.
import signal, sys, threading, time
def crunch_leaf(n):
    s = 0
    for i in range(n): s += i * i
    return s
def crunch_middle(n):
    return crunch_leaf(n)
def crunch_outer(n):
    crunch_middle(n)
    return side_leaf(n // 2)
def side_leaf(n):
    t = 0
    for i in range(n): t ^= i
    return t


running = True


def stop(signum, frame):
    global running
    running = False


def sampler(main, out, period):
    # The independent truth: the main thread's stack as CPython itself
    # reports it, every period seconds, leaf first.
    rows = []
    while running:
        f = sys._current_frames().get(main)
        chain = []
        while f is not None:
            chain.append("%s:%d" % (f.f_code.co_name, f.f_lineno))
            f = f.f_back
        rows.append("%.6f %s" % (time.time(), " ".join(chain)))
        time.sleep(period)
    with open(out, "w") as w:
        w.write("\n".join(rows) + "\n")


# Runs until SIGUSR1; the truth goes to the file named by the argument.
if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, stop)
    t = threading.Thread(target=sampler, args=(threading.current_thread().ident, sys.argv[1], 0.01))
    t.start()
    while running:
        crunch_outer(200000)
    t.join()
