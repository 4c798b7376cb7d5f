package hotspot

import (
	"encoding/binary"
	"testing"

	"github.com/bpfcol/bpfcol/internal/frame"
)

// FuzzVMStructs reads tables whose bytes the fuzzer changes, from JDK 17's
// laid out in a fake process: whatever a process holds, reading them ends,
// within bounds, without a panic, and a layout is used only if it checks.
func FuzzVMStructs(f *testing.F) {
	f.Add(uint32(0), []byte{})
	f.Add(uint32(8), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})       // a huge stride
	f.Add(uint32(fakeStructs+48*3+32), []byte{0x00, 0x10, 0, 0, 0, 0, 0, 0})       // an offset beyond its struct
	f.Add(uint32(fakeStrings), []byte{0x7f, 0x80, 0x01, 0x00})                     // a name of unprintable bytes
	f.Add(uint32(fakeTypes+32), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0})  // a huge size
	f.Add(uint32(fakeStructs+48*len(jdk17Fields)), []byte{1, 2, 3, 4, 5, 6, 7, 8}) // no NULL entry
	f.Fuzz(func(t *testing.T, at uint32, patch []byte) {
		tables := jdk17Tables(17)
		mem := tables.mem
		if at < uint32(len(mem.mem)) {
			copy(mem.mem[at:], patch)
		}
		vs, err := readVMStructs(mem, tables.symbol)
		if mem.read > 4<<20 {
			t.Fatalf("read %d bytes", mem.read)
		}
		if err != nil {
			return
		}
		l, err := readLayout(vs, mem, 0)
		if err != nil {
			return
		}
		if err := l.check(); err != nil {
			t.Fatalf("readLayout returned a layout its check refuses: %v", err)
		}
	})
}

// FuzzLineTable decodes any bytes as a line table and looks lines up.
func FuzzLineTable(f *testing.F) {
	f.Add(writeLineTable([]lineRow{{0, 9}, {2, 10}, {20, 10}, {400, 90}}, 0), uint8(0), uint16(3))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint8(1), uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, excluded uint8, bci uint16) {
		rows, n, _ := decodeLineTable(b, excluded%2)
		if n > len(b) || len(rows) > maxLineRows {
			t.Fatalf("decoded %d rows from %d of %d bytes", len(rows), n, len(b))
		}
		_ = lineOf(rows, int(bci))
	})
}

// FuzzMethodName renders any descriptor: a name or an error, no panic.
func FuzzMethodName(f *testing.F) {
	f.Add("JavaChain", "main", "([Ljava/lang/String;)V")
	f.Add("X", "f", "([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[J)V")
	f.Fuzz(func(t *testing.T, klass, name, desc string) {
		_, _ = methodName(klass, name, desc)
	})
}

// The fake nmethod of FuzzNMethod, laid out as JDK 17's: its header, then
// its metadata (three Method*s), scopes data and PC descriptors.
const (
	fakeNMethod     = 0x200000
	fakeNMethodSize = 352
	fakeCompileID   = 0x1234
)

// fakeNMethodBytes lays out an nmethod whose code at offsets below 0x40
// runs method 1 inlined into 2 inlined into 3, and at 0x40 to 0x80 method
// 3 alone.
func fakeNMethodBytes() []byte {
	b := make([]byte, fakeNMethodSize)
	put32 := func(off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }
	put64 := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	put32(304, fakeCompileID)
	put64(112, 0x6f00) // CompiledMethod::_method
	meta := len(b)
	for i := range 3 {
		b = binary.LittleEndian.AppendUint64(b, 0x7000+uint64(i)*0x100)
	}
	scopes := len(b)
	data := []byte{0}
	outer := uint32(len(data))
	data = writeScope(data, 0, 3, 17, 0)
	middle := uint32(len(data))
	data = writeScope(data, outer, 2, 300, 0)
	leaf := uint32(len(data))
	data = writeScope(data, middle, 1, 5, 0)
	b = append(b, data...)
	pcs := len(b)
	for _, p := range []pcDesc{{-1, 0}, {0x40, leaf}, {0x80, outer}} {
		b = binary.LittleEndian.AppendUint32(b, uint32(p.pc))
		b = binary.LittleEndian.AppendUint32(b, p.scope)
		b = binary.LittleEndian.AppendUint64(b, 0)
	}
	put32(260, uint32(meta))               // nmethod::_metadata_offset
	put64(120, fakeNMethod+uint64(scopes)) // CompiledMethod::_scopes_data_begin
	put32(268, uint32(pcs))                // nmethod::_scopes_pcs_offset
	put32(272, uint32(len(b)))             // nmethod::_dependencies_offset
	return b
}

// jdk17Layout is JDK 17's layout, read from its tables.
func jdk17Layout(t testing.TB) *layout {
	tables := jdk17Tables(17)
	vs, err := readVMStructs(tables.mem, tables.symbol)
	if err != nil {
		t.Fatal(err)
	}
	l, err := readLayout(vs, tables.mem, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNMethodLines(t *testing.T) {
	l := jdk17Layout(t)
	mem := &fakeMemory{base: fakeNMethod, mem: fakeNMethodBytes()}
	n, err := (&reader{l: l, mem: mem}).nmethod(fakeNMethod, fakeCompileID, false, fakeMethods)
	if err != nil {
		t.Fatal(err)
	}
	names := func(lines []frame.Line) []string {
		var out []string
		for _, l := range lines {
			out = append(out, l.Name)
		}
		return out
	}
	for _, c := range []struct {
		offset uint32
		want   []string
	}{
		// The first descriptor after the offset gives its scopes.
		{0, []string{"m0", "m1", "m2"}},
		{0x3f, []string{"m0", "m1", "m2"}},
		{0x40, []string{"m2"}},
		{0x7f, []string{"m2"}},
		// Beyond the last descriptor, or unknown: the method compiled.
		{0x80, []string{"own"}},
		{frame.NoOffset, []string{"own"}},
	} {
		if got := names(n.Lines(c.offset)); !equal(got, c.want) {
			t.Errorf("offset %#x: %v, want %v", c.offset, got, c.want)
		}
	}
	// Lines: each method's bytecode index on its line table.
	if got := n.Lines(0); got[0].Line != 105 || got[1].Line != 400 || got[2].Line != 117 {
		t.Errorf("lines %+v, want 105, 400, 117", got)
	}
	if _, err := (&reader{l: l, mem: mem}).nmethod(fakeNMethod, fakeCompileID+1, false, fakeMethods); err != errNotNMethod {
		t.Errorf("another compile id: %v, want errNotNMethod", err)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fakeMethods names the fake nmethod's methods: 0x7000 + 0x100*i is
// "m<i>", with line 100 + its bytecode index; the compiled method, at
// 0x6f00, "own".
func fakeMethods(addr uint64) *method {
	if addr == 0x6f00 {
		return &method{name: "own"}
	}
	if addr < 0x7000 || addr > 0x7200 || addr%0x100 != 0 {
		return nil
	}
	i := (addr - 0x7000) / 0x100
	m := &method{name: "m" + string(rune('0'+i))}
	for bci := uint16(0); bci < 400; bci++ {
		m.lines = append(m.lines, lineRow{BCI: bci, Line: 100 + uint32(bci)})
	}
	return m
}

// FuzzNMethod reads an nmethod whose bytes the fuzzer changes and names
// offsets in it: whatever the process holds, no panic, bounded reads.
func FuzzNMethod(f *testing.F) {
	f.Add(fakeNMethodBytes(), uint32(0x20))
	f.Fuzz(func(t *testing.T, b []byte, offset uint32) {
		l := jdk17Layout(t)
		mem := &fakeMemory{base: fakeNMethod, mem: b}
		n, err := (&reader{l: l, mem: mem}).nmethod(fakeNMethod, fakeCompileID, false, fakeMethods)
		if mem.read > maxDebugInfo+4096 {
			t.Fatalf("read %d bytes", mem.read)
		}
		if err != nil {
			return
		}
		for _, o := range []uint32{offset, 0, offset / 2, frame.NoOffset} {
			if lines := n.Lines(o); len(lines) == 0 || len(lines) > maxScopes {
				t.Fatalf("offset %d: %d lines", o, len(lines))
			}
		}
	})
}
