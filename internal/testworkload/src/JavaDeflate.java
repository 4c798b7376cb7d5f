// JavaDeflate compresses a buffer again and again through zlib, in a chain
// of three methods, main -> compressOuter -> compressBlock ->
// java.util.zip.Deflater, whose native code calls zlib's deflate: nearly
// all its time is in deflate, called from Java.
import java.util.zip.Deflater;

public class JavaDeflate {
    static long total;

    static int compressBlock(Deflater d, byte[] in, byte[] out) {
        d.reset();
        d.setInput(in);
        d.finish();
        int n = 0;
        while (!d.finished()) {
            n += d.deflate(out);
        }
        return n;
    }

    static void compressOuter(Deflater d, byte[] in, byte[] out) {
        for (int i = 0; i < 4; i++) {
            total += compressBlock(d, in, out);
        }
    }

    public static void main(String[] args) {
        byte[] in = new byte[1 << 16];
        long x = 1;
        for (int i = 0; i < in.length; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            in[i] = (byte) ((x >>> 59) + 'a');
        }
        byte[] out = new byte[1 << 17];
        Deflater d = new Deflater(6);
        for (;;) {
            compressOuter(d, in, out);
        }
    }
}
