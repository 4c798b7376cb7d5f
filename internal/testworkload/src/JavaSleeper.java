// JavaSleeper sleeps in a chain of three methods, main -> napOuter ->
// napLeaf -> Thread.sleep, a millisecond at a time: its thread is off the
// CPU nearly all the time, in that chain. Given a path, it creates that
// file when its main method starts.
public class JavaSleeper {
    static long naps;

    static void napLeaf() throws InterruptedException {
        Thread.sleep(1);
        naps++;
    }

    static void napOuter() throws InterruptedException {
        for (int i = 0; i < 10; i++) {
            napLeaf();
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0) {
            new java.io.FileOutputStream(args[0]).close();
        }
        for (;;) {
            napOuter();
        }
    }
}
