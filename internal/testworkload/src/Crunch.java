// Crunch spends its time in crunchLeaf, a method small enough for C2 to
// inline into its hot caller: main -> crunchOuter -> crunchMiddle ->
// crunchLeaf.
public class Crunch {
    static long sink;

    static long crunchLeaf(long x) {
        return x * 6364136223846793005L + 1442695040888963407L;
    }

    static long crunchMiddle(long x) {
        for (int i = 0; i < 1_000_000; i++) {
            x = crunchLeaf(x);
        }
        return x;
    }

    static long crunchOuter(long x) {
        return crunchMiddle(x) ^ (x >>> 7);
    }

    public static void main(String[] args) {
        for (long i = 0; ; i++) {
            sink += crunchOuter(i);
        }
    }
}
