# threads.py: two threads, each busy in its own function, until SIGUSR1.
# It prints the two threads' native ids. Tests read the line numbers.
import signal, sys, threading
running = True
def alpha_spin():
    x = 0
    while running: x += 1
def beta_spin():
    y = 0
    while running: y ^= 3


def stop(signum, frame):
    global running
    running = False


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, stop)
    a = threading.Thread(target=alpha_spin)
    b = threading.Thread(target=beta_spin)
    a.start()
    b.start()
    print(a.native_id, b.native_id, flush=True)
    a.join()
    b.join()
