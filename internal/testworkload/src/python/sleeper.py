# sleeper.py: a chain of Python functions that sleeps at its leaf, until
# SIGUSR1: its time goes off CPU. Tests read the line numbers.
import signal, time
running = True
def nap_leaf():
    time.sleep(0.002)
def nap_outer():
    nap_leaf()


def stop(signum, frame):
    global running
    running = False


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, stop)
    while running:
        nap_outer()
