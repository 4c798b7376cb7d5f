package python

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzLineTable runs each line table reader on any bytes and offset:
// whatever a process's memory holds, a line lookup ends, within the table,
// without a panic.
func FuzzLineTable(f *testing.F) {
	// Tables CPython 3.6, 3.10 and 3.12 wrote (json.decoder's module).
	f.Add(uint8(lnotab), int64(2), []byte{4, 1, 8, 2, 12, 1, 2, 1, 16, 1, 14, 1, 10, 2}, uint32(20))
	f.Add(uint8(linetable310), int64(1), []byte{8, 1, 6, 0, 4, 1, 0x80, 2, 10, 0x80, 2, 1}, uint32(12))
	f.Add(uint8(locations), int64(1), []byte{0xf0, 3, 1, 1, 1, 0xf1, 2, 1, 1, 4, 0xe3, 0, 9, 0xe5, 0, 0x18, 0xf0, 2, 3, 1}, uint32(14))
	f.Add(uint8(locations), int64(-5), []byte{0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, uint32(0))
	f.Fuzz(func(t *testing.T, kind uint8, first int64, table []byte, offset uint32) {
		ct := codeTable{kind: lineTable(kind%4 + 1), first: first, table: table}
		_ = ct.Line(offset)
		_ = ct.Line(offset / 2)
	})
}

// fakeMemory is a process's memory: bytes from base.
type fakeMemory struct {
	base uint64
	mem  []byte
	read int // bytes read, to check the bounds hold
}

func (m *fakeMemory) Read(addr uint64, buf []byte) error {
	m.read += len(buf)
	if addr < m.base || addr-m.base > uint64(len(m.mem)) || uint64(len(buf)) > uint64(len(m.mem))-(addr-m.base) {
		return errors.New("not mapped")
	}
	copy(buf, m.mem[addr-m.base:])
	return nil
}

// Addresses of the fake process's type objects and heap.
const (
	fakeCode  = 0x1000
	fakeStr   = 0x2000
	fakeBytes = 0x3000
	fakeHeap  = 0x100000
)

// fakeLayout is CPython 3.12's, as findLayout reads it from libpython.
func fakeLayout() *layout {
	return &layout{
		version: Version{3, 12}, codeSize: 192,
		coName: 120, coQualname: 128, coFilename: 112, coFirstLine: 68, coLineTable: 136,
		hasQual: true, lines: locations, codeInsns: 192,
		asciiData: 40, compactData: 56, bytesSize: 16, bytesData: 32,
	}
}

// fakeCodeObject lays a code object named qual, in file, with a line table,
// out in a fake heap at fakeHeap.
func fakeCodeObject(qual, file string, table []byte) []byte {
	l := fakeLayout()
	heap := make([]byte, 1024)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(heap[off:], v) }
	str := func(off int, s string) {
		put(off+obType, fakeStr)
		put(off+strLength, uint64(len(s)))
		// kind 1, compact, ascii
		binary.LittleEndian.PutUint32(heap[off+strState:], 1<<2|1<<5|1<<6)
		copy(heap[off+int(l.asciiData):], s)
	}
	put(obType, fakeCode)
	put(int(l.coQualname), fakeHeap+256)
	put(int(l.coName), fakeHeap+256)
	put(int(l.coFilename), fakeHeap+384)
	put(int(l.coLineTable), fakeHeap+640)
	binary.LittleEndian.PutUint32(heap[l.coFirstLine:], 4)
	str(256, qual)
	str(384, file)
	put(640+obType, fakeBytes)
	put(640+int(l.bytesSize), uint64(len(table)))
	copy(heap[640+int(l.bytesData):], table)
	return heap
}

// FuzzCodeObject reads a code object out of any memory: it is named, or
// refused, within the bounds of one object's reads, without a panic.
func FuzzCodeObject(f *testing.F) {
	f.Add(fakeCodeObject("crunch_leaf", "/srv/crunch.py", []byte{0xf0, 3, 1, 1, 1, 0xf1, 2}))
	f.Add(fakeCodeObject("Outer.<locals>.inner", "<frozen importlib._bootstrap>", nil))
	f.Fuzz(func(t *testing.T, heap []byte) {
		mem := &fakeMemory{base: fakeHeap, mem: heap}
		r := codeReader{l: fakeLayout(), mem: mem, types: objectTypes{code: fakeCode, str: fakeStr, bytes: fakeBytes}}
		obj, err := r.Object(fakeHeap)
		// One header, three string or bytes headers, and their contents,
		// each within its bound (a str of UCS-4 characters at most 4
		// bytes each).
		bound := maxCodeHeader + 3*strHeaderBytes + 4*(maxNameLen+maxFileLen) + maxLineTable + 24 + strState
		if mem.read > bound {
			t.Fatalf("read %d bytes of the process for one code object, bound %d", mem.read, bound)
		}
		if err != nil {
			return
		}
		if len([]rune(obj.Name)) > maxNameLen || len([]rune(obj.File)) > maxFileLen {
			t.Fatalf("a name of %d and a file of %d characters", len([]rune(obj.Name)), len([]rune(obj.File)))
		}
		_ = obj.Lines.Line(0)
		if _, err := r.Identity(fakeHeap); err != nil {
			t.Fatalf("identity of a code object read: %v", err)
		}
	})
}

// TestIdentityStable: what tells a code object apart stays the same while
// the object lives, whatever its reference count does, in every layout
// (before 3.11 there is no qualified name, and nothing at offset 0 but
// the count may be read for one).
func TestIdentityStable(t *testing.T) {
	for _, qual := range []bool{true, false} {
		l := fakeLayout()
		l.hasQual = qual
		if !qual {
			l.coQualname = 0
		}
		heap := fakeCodeObject("crunch_leaf", "/srv/crunch.py", nil)
		mem := &fakeMemory{base: fakeHeap, mem: heap}
		r := codeReader{l: l, mem: mem, types: objectTypes{code: fakeCode, str: fakeStr, bytes: fakeBytes}}
		before, err := r.Identity(fakeHeap)
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint64(heap[0:], 7) // ob_refcnt
		after, err := r.Identity(fakeHeap)
		if err != nil {
			t.Fatal(err)
		}
		if string(before) != string(after) {
			t.Errorf("qualified names %v: the identity changed with the reference count", qual)
		}
	}
}
