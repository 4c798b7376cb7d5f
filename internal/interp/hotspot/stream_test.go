package hotspot

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// writeU5 encodes v as HotSpot's CompressedWriteStream::write_int does
// (UNSIGNED5: 192 low codes end a number, 64 high codes carry 6 bits on),
// each byte raised by excluded (JDK 21's UNSIGNED5 leaves 0 out).
func writeU5(dst []byte, v uint32, excluded uint8) []byte {
	low := uint32(u5Low - excluded)
	sum := v
	for i := 0; ; i++ {
		if sum < low || i == u5MaxBytes-1 {
			return append(dst, byte(sum)+excluded)
		}
		sum -= low
		dst = append(dst, byte(low+sum%64)+excluded)
		sum >>= 6
	}
}

// writeSigned encodes v zigzagged, as write_signed_int does.
func writeSigned(dst []byte, v int32, excluded uint8) []byte {
	return writeU5(dst, uint32(v<<1)^uint32(v>>31), excluded)
}

func TestUnsigned5(t *testing.T) {
	// Bytes HotSpot 17's writer gives (worked through write_int_mb).
	if got := writeU5(nil, 192, 0); !slices.Equal(got, []byte{192, 0}) {
		t.Fatalf("192 encodes as %v, want [192 0]", got)
	}
	values := []uint32{0, 1, 63, 64, 190, 191, 192, 255, 256, 12345, 1 << 20, 1<<31 - 1, 1 << 31, 1<<32 - 1}
	for range 1000 {
		values = append(values, rand.Uint32()>>rand.IntN(32))
	}
	for _, excluded := range []uint8{0, 1} {
		var b []byte
		for _, v := range values {
			b = writeU5(b, v, excluded)
		}
		s := stream{b: b, excluded: excluded}
		for _, want := range values {
			got, err := s.uint()
			if err != nil || got != want {
				t.Fatalf("excluded %d: read %d, %v; want %d", excluded, got, err, want)
			}
		}
		if s.pos != len(b) {
			t.Fatalf("excluded %d: read %d of %d bytes", excluded, s.pos, len(b))
		}
	}
}

// writeLineTable encodes rows as HotSpot's CompressedLineNumberWriteStream
// does: a delta pair in one byte when the bytecode delta fits 5 bits and
// the line delta 3, else 0xff and both as signed numbers; 0 ends it.
func writeLineTable(rows []lineRow, excluded uint8) []byte {
	var b []byte
	bci, line := 0, 0
	for _, r := range rows {
		db, dl := int(r.BCI)-bci, int(r.Line)-line
		if db >= 0 && db < 32 && dl >= 0 && dl < 8 && (db|dl) != 0 {
			b = append(b, byte(db<<3|dl))
		} else {
			b = append(b, lineEscape)
			b = writeSigned(b, int32(db), excluded)
			b = writeSigned(b, int32(dl), excluded)
		}
		bci, line = int(r.BCI), int(r.Line)
	}
	return append(b, lineEnd)
}

func TestLineTable(t *testing.T) {
	// A method's rows are in bytecode order; a loop's line comes back
	// after later ones (the line goes down), and long methods jump far.
	rows := []lineRow{{0, 9}, {2, 10}, {10, 11}, {20, 10}, {25, 13}, {400, 90}, {401, 12}, {60000, 100000}}
	for _, excluded := range []uint8{0, 1} {
		b := writeLineTable(rows, excluded)
		got, n, err := decodeLineTable(b, excluded)
		if err != nil || n != len(b) || !slices.Equal(got, rows) {
			t.Fatalf("excluded %d: decoded %v, %d of %d bytes, %v; want %v", excluded, got, n, len(b), err, rows)
		}
		// Cut short: what was read, and an error.
		if _, _, err := decodeLineTable(b[:len(b)-1], excluded); err == nil {
			t.Fatalf("excluded %d: a table without its end decoded without an error", excluded)
		}
	}
	for _, c := range []struct {
		bci  int
		line uint32
	}{{0, 9}, {1, 9}, {2, 10}, {9, 10}, {10, 11}, {19, 11}, {20, 10}, {24, 10}, {25, 13}, {401, 12}, {59999, 12}, {60000, 100000}, {65535, 100000}} {
		if got := lineOf(rows, c.bci); got != c.line {
			t.Errorf("bytecode %d: line %d, want %d", c.bci, got, c.line)
		}
	}
	if got := lineOf(nil, 3); got != 0 {
		t.Errorf("no table: line %d, want 0", got)
	}
}

// writeScope appends a scope as DebugInformationRecorder does: the
// sender's offset, the method's metadata index, the bytecode index plus 1,
// then the offsets of its locals, expressions and monitors.
func writeScope(b []byte, sender uint32, method uint32, bci int32, excluded uint8) []byte {
	for _, v := range []uint32{sender, method, uint32(bci + 1), 0, 0, 0} {
		b = writeU5(b, v, excluded)
	}
	return b
}

func TestDecodeScopes(t *testing.T) {
	for _, excluded := range []uint8{0, 1} {
		// Offset 0 is the null scope: the stream starts with a byte.
		b := []byte{0}
		outer := uint32(len(b))
		b = writeScope(b, 0, 3, 17, excluded)
		middle := uint32(len(b))
		b = writeScope(b, outer, 2, 300, excluded)
		leaf := uint32(len(b))
		b = writeScope(b, middle, 1, -1, excluded)
		got, err := decodeScopes(b, leaf, excluded, nil)
		want := []scope{{1, -1}, {2, 300}, {3, 17}}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("excluded %d: %v, %v; want %v", excluded, got, err, want)
		}
		// A sender after its scope would make a loop: refused.
		loop := writeScope(slices.Clone(b[:1]), 1, 1, 0, excluded)
		if _, err := decodeScopes(loop, 1, excluded, nil); err == nil {
			t.Fatalf("excluded %d: a scope its own sender decoded", excluded)
		}
		if _, err := decodeScopes(b, uint32(len(b)), excluded, nil); err == nil {
			t.Fatalf("excluded %d: a scope beyond the data decoded", excluded)
		}
	}
}
