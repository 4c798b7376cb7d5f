package v8

import (
	"testing"
	"unicode/utf8"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/lru"
)

// FuzzPositions decodes any bytes as a source position table, and as a
// baseline code's offset table with its bytecode: each ends, within the
// table, without a panic.
func FuzzPositions(f *testing.F) {
	f.Add(encodePositions([][3]int64{{0, 120, 0}, {16, 80, 1}, {32, 40, 2}, {48, 120, 0}}), []byte{10, 0, 0, 20, 10, 0, 0}, uint32(13))
	f.Add([]byte{5, 8, 4, 8}, []byte{10, 0, 0, 20, 10, 0, 0}, uint32(17))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, []byte{0}, uint32(0))
	l := node20Layout(f)
	f.Fuzz(func(t *testing.T, table, code []byte, off uint32) {
		ps, err := decodePositions(table, 64)
		if err == nil {
			if len(ps) > 64 {
				t.Fatalf("%d entries, limit 64", len(ps))
			}
			for i := 1; i < len(ps); i++ {
				if ps[i].code < ps[i-1].code {
					t.Fatalf("entries out of order: %+v", ps)
				}
			}
			if i := at(ps, off); i >= len(ps) {
				t.Fatalf("at = %d of %d", i, len(ps))
			}
		}
		if o, err := baselineMap(table, code, &l.bytecodeSizes, uint64(off)); err == nil && int(o) > len(code) {
			t.Fatalf("bytecode offset %d beyond %d bytes of bytecode", o, len(code))
		}
	})
}

// FuzzFrame locates and names a V8 frame out of any memory, as a corrupt
// or hostile process may lay it out: it is named or refused, without a
// panic, its names within their bounds, its inlined lines no more than
// the inlinings.
func FuzzFrame(f *testing.F) {
	c := newChainHeap(f)
	seed := c.h.memory().mem
	f.Add(seed, uint32(c.outer-fakeBase), uint32(c.optStart+40-fakeBase))
	f.Add(seed, uint32(c.leaf-fakeBase), uint32(c.baseStart+13-fakeBase))
	f.Add(seed, uint32(c.leaf-fakeBase), uint32(0))
	l := c.h.l
	f.Fuzz(func(t *testing.T, mem []byte, fn, pc uint32) {
		in := &instance{
			client:  New(Config{}),
			serial:  1,
			heap:    heap{l: l, mem: &fakeMemory{base: fakeBase, mem: mem}},
			codes:   newCodeRanges(16),
			located: lru.New[locatedKey, located](16, nil),
		}
		fr := frame.Frame{Type: frame.V8JS, Address: fakeBase + uint64(fn), Offset: frame.NoOffset, Native: fakeBase + uint64(pc)}
		addr, off, err := in.Locate(&fr)
		if err != nil {
			return
		}
		for _, a := range []uint64{addr, fr.Address} {
			obj, err := in.Object(a)
			if err != nil {
				continue
			}
			if utf8.RuneCountInString(obj.Name) > maxNameLen || utf8.RuneCountInString(obj.File) > maxFileLen {
				t.Fatalf("a name of %d and a file of %d characters", len(obj.Name), len(obj.File))
			}
			if _, err := in.Identity(a); err != nil {
				t.Fatalf("identity of an object named: %v", err)
			}
			if obj.Inlines == nil {
				continue
			}
			if n := len(obj.Inlines.Lines(off)); n == 0 || n > maxInlined+1 {
				t.Fatalf("%d lines at one offset, none or more than the inlinings", n)
			}
		}
	})
}
