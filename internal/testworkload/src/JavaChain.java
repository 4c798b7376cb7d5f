// JavaChain runs a chain of four methods, main -> chainOuter ->
// chainMiddle -> chainLeaf, and spends its time in chainLeaf's loop. C2
// inlines chainLeaf into chainMiddle (and both into chainOuter), so
// compiled code names the leaf only through the debug information of its
// inlined scope: the safepoint poll of its loop lies in it. Given a path,
// it creates that file when its main method starts (the JVM's own start-up
// runs Java code on the main thread before it).
public class JavaChain {
    static long sink;

    static long chainLeaf(long x) {
        for (int i = 0; i < 2000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return x;
    }

    static long chainMiddle(long x) {
        for (int i = 0; i < 500; i++) {
            x = chainLeaf(x) ^ i;
        }
        return x;
    }

    static long chainOuter(long x) {
        return chainMiddle(x) ^ (x >>> 7);
    }

    public static void main(String[] args) throws java.io.IOException {
        if (args.length > 0) {
            new java.io.FileOutputStream(args[0]).close();
        }
        for (long i = 0; ; i++) {
            sink += chainOuter(i);
        }
    }
}
