# reuse.py: a function compiled anew for each phase, busy for the phase,
# until SIGUSR1: each new code object is allocated where the last one was
# freed. It logs when each phase starts, its function and code address.
import signal, sys, time
running = True


def stop(signum, frame):
    global running
    running = False


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, stop)
    log, phase = open(sys.argv[1], "w"), float(sys.argv[2])
    i = 0
    while running:
        ns = {}
        src = "def gen_%d(until):\n    while time.time() < until: pass\n" % i
        exec(compile(src, "gen.py", "exec"), {"time": time}, ns)
        f = ns["gen_%d" % i]
        start = time.time()
        log.write("%.6f gen_%d %x\n" % (start, i, id(f.__code__)))
        log.flush()
        f(start + phase)
        del f, ns
        i += 1
