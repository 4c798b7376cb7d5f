package v8

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

// TestLayoutNode20 builds node 20's layout from its post-mortem data:
// the frame slots and fields it exports, and the Code fields filled in
// for 11.3, where a dump of its objects found them.
func TestLayoutNode20(t *testing.T) {
	l := node20Layout(t)
	for name, c := range map[string][2]uint64{
		"fp context":              {l.fpContext, 8},
		"fp function":             {l.fpFunction, 16},
		"fp bytecode array":       {l.fpBytecodeArray, 32},
		"fp bytecode offset":      {l.fpBytecodeOffset, 40},
		"JSFunction shared":       {l.functionShared, 24},
		"SFI function data":       {l.sfiFunctionData, 8},
		"Code deopt data":         {l.codeDeopt, 16},
		"Code source positions":   {l.codeSourcePositions, 24},
		"Code instruction stream": {l.codeInstructionStream, 32},
		"Code instruction start":  {l.codeInstructionStart, 40},
		"Code flags":              {l.codeFlags, 48},
		"Code instruction size":   {l.codeInstructionSize, 56},
		"stream header":           {l.istreamHeader, 16},
		"bytecode positions":      {l.bytecodeSourcePositions, 32},
		"bytecode data":           {l.bytecodeData, 54},
	} {
		if c[0] != c[1] {
			t.Errorf("%s at %d, want %d", name, c[0], c[1])
		}
	}
	if err := l.check(); err != nil {
		t.Error(err)
	}
}

// TestLayoutRefused: other versions, other tagging, and post-mortem data
// that lacks a field are refused, saying why, never guessed.
func TestLayoutRefused(t *testing.T) {
	for name, c := range map[string]struct {
		v    Version
		edit func(mapSymbols)
		want string
	}{
		"node 22's V8":        {Version{12, 4, 254}, func(mapSymbols) {}, "Code objects is not known"},
		"node 18's V8":        {Version{10, 2, 154}, func(mapSymbols) {}, "Code objects is not known"},
		"pointer compression": {node20, func(m mapSymbols) { m["TaggedSize"] = 4 }, "pointer compression"},
		"a field missing":     {node20, func(m mapSymbols) { delete(m, "class_Script__name__Object") }, "class_Script__name__Object"},
		"a frame slot beyond": {node20, func(m mapSymbols) { m["off_fp_function"] = -72 }, "frame slot"},
	} {
		t.Run(name, func(t *testing.T) {
			syms := maps.Clone(node20Symbols(t))
			c.edit(syms)
			_, err := newLayout(c.v, syms)
			if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("newLayout = %v, want ErrUnsupportedVersion saying %q", err, c.want)
			}
		})
	}
}

// TestPlace: JIT code replaces its native frame; in the embedded
// builtins an interpreted frame does too, its bytecode offset counted
// from the bytecode; a frame without one called a builtin; elsewhere the
// V8 frame is dropped.
func TestPlace(t *testing.T) {
	c := newChainHeap(t)
	in := c.instance()
	node := process.Mapping{Start: 0x400000, End: 0x800000, Perms: "r-xp", Path: "/usr/bin/node", Inode: 7, Dev: 1}
	in.File, in.blob = node.Key(), Range{0x1000, 0x2000}
	jit := process.Mapping{Start: 0x7f0000000000, End: 0x7f0000100000, Perms: "rwxp"}
	libc := process.Mapping{Start: 0x7f1000000000, End: 0x7f1000100000, Perms: "r-xp", Path: "/usr/lib/libc.so.6", Inode: 8, Dev: 1}
	header := uint32(c.h.l.bytecodeData - 1)
	for name, cs := range map[string]struct {
		m      process.Mapping
		addr   uint64
		offset uint32
		want   interp.Placement
		off    uint32
	}{
		"JIT code":              {jit, jit.Start + 10, frame.NoOffset, interp.PlaceReplace, frame.NoOffset},
		"interpreted":           {node, node.Start + 0x1500, header + 7, interp.PlaceReplace, 7},
		"a frameless builtin":   {node, node.Start + 0x1500, frame.NoOffset, interp.PlaceCaller, frame.NoOffset},
		"node's C++":            {node, node.Start + 0x3000, header + 7, interp.PlaceDrop, header + 7},
		"libc":                  {libc, libc.Start + 10, frame.NoOffset, interp.PlaceDrop, frame.NoOffset},
		"JIT code mapped since": {process.Mapping{}, jit.Start + 10, frame.NoOffset, interp.PlaceReplace, frame.NoOffset},
	} {
		native := frame.Frame{Address: cs.addr, Mapping: &frame.Mapping{Mapping: cs.m}}
		if cs.m == (process.Mapping{}) {
			native.Mapping = nil
		}
		f := frame.Frame{Type: frame.V8JS, Address: c.leaf, Offset: cs.offset, Native: cs.addr}
		if got := in.Place(&native, &f); got != cs.want || f.Offset != cs.off {
			t.Errorf("%s: Place = %d, offset %d; want %d, offset %d", name, got, f.Offset, cs.want, cs.off)
		}
	}
}

// TestHostileStrings: strings a corrupt or hostile process lays out are
// refused, each within its bounds: nested too deep, a cons string that is
// its own half, a tree of cons strings sharing their halves (as deep as
// it is wide), halves longer than the length they claim, a length beyond
// the bound, an external string without its characters, not a string.
func TestHostileStrings(t *testing.T) {
	l := node20Layout(t)
	h := newFakeHeap(l)
	deep := h.seqString("crunchLeaf")
	for range maxStrDepth + 1 {
		deep = h.consString(deep, h.seqString(""), 10)
	}
	self := h.consString(0, 0, 4)
	h.put(self, l.consFirst, self)
	h.put(self, l.consSecond, self)
	wide := h.seqString("")
	for range maxStrDepth - 1 {
		wide = h.consString(wide, wide, 0)
	}
	lying := h.consString(h.seqString("Module."), h.seqString("_compile"), 3)
	long := h.seqString(string(make([]byte, maxNameLen+1)))
	ext := h.externalString("node:fs")
	h.put(ext, l.externalData, 0)
	cases := map[string]uint64{
		"nested too deep": deep, "its own half": self, "shared halves": wide, "longer than its length": lying,
		"too long": long, "external without characters": ext, "not a string": h.undefined(),
	}
	for name, obj := range cases {
		mem := h.memory()
		hp := &heap{l: l, mem: mem}
		got, err := hp.str(obj, maxNameLen)
		if err == nil {
			t.Errorf("%s: str = %q, want an error", name, got)
		}
		// Each string read is a header and a word or two.
		if mem.read > 64*maxStrPieces {
			t.Errorf("%s: read %d bytes of the process", name, mem.read)
		}
	}
}

// TestHostileArrays: a byte array or a fixed array whose length claims
// more than the process has there costs a piece of the read, not the
// length claimed; beyond the bound it is refused without a read.
func TestHostileArrays(t *testing.T) {
	l := node20Layout(t)
	h := newFakeHeap(l)
	bytes := h.byteArray([]byte{1, 2, 3})
	h.put(bytes, l.fixedLength, smiOf(maxTableLen))
	fixed := h.fixedArray(l.typeFixedArray, 1, 2)
	h.put(fixed, l.fixedLength, smiOf(1<<30))
	beyond := h.byteArray(nil)
	h.put(beyond, l.fixedLength, smiOf(maxTableLen+1))
	negative := h.byteArray(nil)
	h.put(negative, l.fixedLength, smiOf(-8))
	for name, read := range map[string]func(*heap) error{
		"bytes":    func(hp *heap) error { _, err := hp.byteArray(bytes, l.typeByteArray, maxTableLen); return err },
		"fixed":    func(hp *heap) error { _, err := hp.fixedArray(fixed, l.typeFixedArray, 1<<30); return err },
		"beyond":   func(hp *heap) error { _, err := hp.byteArray(beyond, l.typeByteArray, maxTableLen); return err },
		"negative": func(hp *heap) error { _, err := hp.byteArray(negative, l.typeByteArray, maxTableLen); return err },
	} {
		mem := h.memory()
		if err := read(&heap{l: l, mem: mem}); err == nil {
			t.Errorf("%s: read, want an error", name)
		}
		if mem.read > readChunk+64 {
			t.Errorf("%s: read %d bytes of the process, more than a piece", name, mem.read)
		}
	}
}

// TestCorruptCode: a frame is named by a code object only when the code
// is whole and its own: a Code that does not point back at its stream,
// optimized code of another function, or an address in no code leave the
// frame's function without a line.
func TestCorruptCode(t *testing.T) {
	c := newChainHeap(t)
	in := c.instance()
	f := frame.Frame{Type: frame.V8JS, Address: c.outer, Offset: frame.NoOffset, Native: c.optStart + 40}
	if addr, off, err := in.Locate(&f); err != nil || addr != c.optimized || off != 40 {
		t.Fatalf("Locate in the whole heap = %#x+%d, %v; want %#x+40", addr, off, err, c.optimized)
	}
	for name, cs := range map[string]struct {
		fn, pc uint64
		edit   func(h *fakeHeap)
	}{
		"another function's frame":     {c.leaf, c.optStart + 40, func(*fakeHeap) {}},
		"an address in no code":        {c.outer, fakeBase + 8, func(*fakeHeap) {}},
		"beyond the code's size":       {c.outer, c.optStart + 40, func(h *fakeHeap) { h.put32(c.optimized, h.l.codeInstructionSize, 16) }},
		"a Code not pointing back":     {c.outer, c.optStart + 40, func(h *fakeHeap) { h.put(c.optimized, h.l.codeInstructionStream, c.baseline) }},
		"a stream of another Code":     {c.outer, c.optStart + 40, func(h *fakeHeap) { h.put(c.optimized, h.l.codeInstructionStart, c.baseStart) }},
		"baseline of another function": {c.outer, c.baseStart + 13, func(*fakeHeap) {}},
	} {
		t.Run(name, func(t *testing.T) {
			c := newChainHeap(t)
			cs.edit(c.h)
			in := c.instance()
			f := frame.Frame{Type: frame.V8JS, Address: cs.fn, Offset: frame.NoOffset, Native: cs.pc}
			if addr, off, _ := in.Locate(&f); addr != cs.fn || off != frame.NoOffset {
				t.Errorf("Locate = %#x+%d, want the frame's function %#x without an offset", addr, off, cs.fn)
			}
		})
	}
}

// TestLocateAfterExit: once the process is gone (its reads fail with
// ESRCH), a frame located while it ran is located as before, and one
// never seen is left without a line; while it runs, a read that fails
// otherwise is not answered from the past.
func TestLocateAfterExit(t *testing.T) {
	c := newChainHeap(t)
	in := c.instance()
	mem := in.heap.mem.(*fakeMemory)
	seen := frame.Frame{Type: frame.V8JS, Address: c.outer, Offset: frame.NoOffset, Native: c.optStart + 40}
	if addr, off, err := in.Locate(&seen); err != nil || addr != c.optimized || off != 40 {
		t.Fatalf("Locate while running = %#x+%d, %v; want %#x+40", addr, off, err, c.optimized)
	}
	mem.gone = true
	if addr, off, err := in.Locate(&seen); err != nil || addr != c.optimized || off != 40 {
		t.Errorf("Locate after exit = %#x+%d, %v; want %#x+40 as before", addr, off, err, c.optimized)
	}
	unseen := frame.Frame{Type: frame.V8JS, Address: c.outer, Offset: frame.NoOffset, Native: c.optStart + 48}
	if addr, off, _ := in.Locate(&unseen); addr != c.outer || off != frame.NoOffset {
		t.Errorf("Locate after exit of a frame never located = %#x+%d, want the frame's function %#x without an offset", addr, off, c.outer)
	}
	mem.gone = false
	mem.mem = nil // unmapped, the process still there
	if addr, off, _ := in.Locate(&seen); addr != c.outer || off != frame.NoOffset {
		t.Errorf("Locate with the code unmapped = %#x+%d, want the frame's function %#x without an offset", addr, off, c.outer)
	}
}

// TestHostileScripts: optimized code whose inlined functions each have a
// Script of their own, all sharing one long source, costs the reads of
// maxScriptReads sources, not one for each function.
func TestHostileScripts(t *testing.T) {
	l := node20Layout(t)
	h := newFakeHeap(l)
	src := h.seqString(strings.Repeat("x = 1;\n", 16<<10))
	own := h.function(h.seqString("outer"), h.script(h.seqString("/srv/a.js"), src), 0)
	const n = 200
	var lits []uint64
	var inlining []byte
	for i := range n {
		lits = append(lits, h.function(h.seqString("f"), h.script(h.seqString("/srv/a.js"), src), 0))
		rec := make([]byte, l.inliningSize)
		putLE64(rec, sourcePosition(int64(i), 0))
		putLE32(rec[l.inliningFunction:], uint32(i))
		inlining = append(inlining, rec...)
	}
	deopt := h.fixedArray(l.typeFixedArray, smiOf(0), smiOf(n), h.fixedArray(l.typeFixedArray, lits...), 0, 0, 0, own, h.byteArray(inlining))
	code, _ := h.code(13, 64, deopt, h.byteArray(encodePositions([][3]int64{{0, 7, 1}, {16, 7, n}})))
	mem := h.memory()
	in := &instance{client: New(Config{}), serial: 1, heap: heap{l: l, mem: mem}, codes: newCodeRanges(16), located: lru.New[locatedKey, located](16, nil)}
	obj, err := in.Object(code)
	if err != nil || obj.Name != "outer" {
		t.Fatalf("Object = %+v, %v; want outer", obj, err)
	}
	// The first inlined function's script was read, its line known;
	// the last one's was not: named without its file. Each was inlined
	// at its own offset of outer: line 1, and 199 (line 29).
	tab := obj.Inlines
	first, last := tab.Lines(0), tab.Lines(16)
	if len(first) != 2 || first[0].Name != "f" || first[0].File != "/srv/a.js" || first[0].Line != 2 || first[1].Line != 1 {
		t.Errorf("lines at 0: %+v, want f at /srv/a.js:2 inlined into outer at line 1", first)
	}
	if len(last) != 2 || last[0].Name != "f" || last[0].File != "" || last[1].Name != "outer" || last[1].Line != 29 {
		t.Errorf("lines at 16: %+v, want f without a file inlined into outer at line 29", last)
	}
	sourceBytes := 7 * 16 << 10
	if limit := (maxScriptReads + 1) * sourceBytes; mem.read > limit {
		t.Errorf("read %d bytes of the process, more than %d sources (%d)", mem.read, maxScriptReads+1, limit)
	}
	t.Logf("read %d bytes, %d sources' worth", mem.read, mem.read/sourceBytes)
}
