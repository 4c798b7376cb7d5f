package v8

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bpfcol/bpfcol/internal/lru"
)

// mapSymbols are v8dbg_* values by name.
type mapSymbols map[string]int64

func (m mapSymbols) value(name string) (int64, bool) {
	v, ok := m[name]
	return v, ok
}

// node20Symbols reads the post-mortem data of node 20's V8 (11.3.244)
// kept in testdata, as that node's binary holds it.
func node20Symbols(tb testing.TB) mapSymbols {
	tb.Helper()
	f, err := os.Open("testdata/v8dbg-node-20.20.2.txt")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	out := mapSymbols{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		name, v, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			tb.Fatalf("testdata: %q: %v", line, err)
		}
		out[name] = n
	}
	return out
}

var node20 = Version{11, 3, 244}

// node20Layout is node 20's layout.
func node20Layout(tb testing.TB) *layout {
	tb.Helper()
	l, err := newLayout(node20, node20Symbols(tb))
	if err != nil {
		tb.Fatal(err)
	}
	// kBytecodeSizes for the handful of bytecodes the tests use: every
	// bytecode 1 byte plus one operand of the scale, but for 10 (two
	// operands) and 20 (none).
	for s := range l.bytecodeSizes {
		l.bytecodeSizes[s] = make([]byte, 32)
		for op := range l.bytecodeSizes[s] {
			l.bytecodeSizes[s][op] = byte(1 + 1<<s)
		}
		l.bytecodeSizes[s][10] = byte(1 + 2<<s)
		l.bytecodeSizes[s][20] = 1
	}
	return l
}

// fakeMemory is a process's memory: bytes from base. It counts what is
// read, to check that reads stay within their bounds.
type fakeMemory struct {
	base uint64
	mem  []byte
	read int
	// gone makes every read fail as one of a process that exited.
	gone bool
}

func (m *fakeMemory) Read(addr uint64, buf []byte) error {
	if m.gone {
		return fmt.Errorf("reading %d bytes at %#x: %w", len(buf), addr, syscall.ESRCH)
	}
	m.read += len(buf)
	if addr < m.base || addr-m.base > uint64(len(m.mem)) || uint64(len(buf)) > uint64(len(m.mem))-(addr-m.base) {
		return errors.New("not mapped")
	}
	copy(buf, m.mem[addr-m.base:])
	return nil
}

// fakeBase is where a fake heap starts.
const fakeBase = 0x10000

// fakeHeap lays V8 objects out in memory as node 20's V8 would: each
// object's first word its map (tagged), each map an object whose instance
// type is at the layout's offset.
type fakeHeap struct {
	l    *layout
	mem  []byte
	maps map[uint16]uint64
}

func newFakeHeap(l *layout) *fakeHeap {
	return &fakeHeap{l: l, maps: map[uint16]uint64{}}
}

// alloc reserves n bytes, 8-aligned, and returns their tagged address.
func (h *fakeHeap) alloc(n int) uint64 {
	addr := fakeBase + uint64(len(h.mem))
	h.mem = append(h.mem, make([]byte, (n+7)&^7)...)
	return addr + 1
}

func (h *fakeHeap) put(obj, off, v uint64) {
	binary.LittleEndian.PutUint64(h.mem[obj-1-fakeBase+off:], v)
}

func (h *fakeHeap) put32(obj, off uint64, v uint32) {
	binary.LittleEndian.PutUint32(h.mem[obj-1-fakeBase+off:], v)
}

func (h *fakeHeap) bytes(obj, off uint64, b []byte) {
	copy(h.mem[obj-1-fakeBase+off:], b)
}

// mapOf returns the map of instance type t.
func (h *fakeHeap) mapOf(t uint16) uint64 {
	if m, ok := h.maps[t]; ok {
		return m
	}
	m := h.alloc(int(h.l.mapInstanceType) + 8)
	binary.LittleEndian.PutUint16(h.mem[m-1-fakeBase+h.l.mapInstanceType:], t)
	h.maps[t] = m
	return m
}

// object allocates an object of type t of n bytes.
func (h *fakeHeap) object(t uint16, n int) uint64 {
	m := h.mapOf(t)
	o := h.alloc(n)
	h.put(o, h.l.heapMap, m)
	return o
}

func smiOf(v int64) uint64 { return uint64(v) << 32 }

// seqString allocates a one-byte sequential string.
func (h *fakeHeap) seqString(s string) uint64 {
	t := h.l.strSeq | h.l.strOneByte
	o := h.object(t, int(h.l.seqChars)+len(s))
	h.put32(o, h.l.strLength, uint32(len(s)))
	h.bytes(o, h.l.seqChars, []byte(s))
	return o
}

// twoByteString allocates a two-byte sequential string.
func (h *fakeHeap) twoByteString(s []uint16) uint64 {
	t := h.l.strSeq
	o := h.object(t, int(h.l.seqChars)+2*len(s))
	h.put32(o, h.l.strLength, uint32(len(s)))
	for i, c := range s {
		binary.LittleEndian.PutUint16(h.mem[o-1-fakeBase+h.l.seqChars+uint64(2*i):], c)
	}
	return o
}

// consString allocates a cons string of first and second.
func (h *fakeHeap) consString(first, second uint64, n int) uint64 {
	o := h.object(h.l.strCons|h.l.strOneByte, int(h.l.consSecond)+8)
	h.put32(o, h.l.strLength, uint32(n))
	h.put(o, h.l.consFirst, first)
	h.put(o, h.l.consSecond, second)
	return o
}

// slicedString allocates a sliced string of n characters of parent from
// offset off.
func (h *fakeHeap) slicedString(parent uint64, off, n int) uint64 {
	o := h.object(h.l.strSliced|h.l.strOneByte, int(h.l.slicedOffset)+8)
	h.put32(o, h.l.strLength, uint32(n))
	h.put(o, h.l.slicedParent, parent)
	h.put(o, h.l.slicedOffset, smiOf(int64(off)))
	return o
}

// externalString allocates an external one-byte string whose characters
// are elsewhere in the heap.
func (h *fakeHeap) externalString(s string) uint64 {
	data := h.alloc(len(s))
	h.bytes(data, 0, []byte(s))
	o := h.object(h.l.strExternal|h.l.strOneByte, int(h.l.externalData)+8)
	h.put32(o, h.l.strLength, uint32(len(s)))
	h.put(o, h.l.externalData, data-1)
	return o
}

// undefined is an oddball: neither a string nor a FixedArray.
func (h *fakeHeap) undefined() uint64 { return h.object(131, 48) }

// fixedArray allocates a FixedArray (or another type laid out as one).
func (h *fakeHeap) fixedArray(t uint16, elems ...uint64) uint64 {
	o := h.object(t, int(h.l.fixedData)+8*len(elems))
	h.put(o, h.l.fixedLength, smiOf(int64(len(elems))))
	for i, e := range elems {
		h.put(o, h.l.fixedData+uint64(8*i), e)
	}
	return o
}

// byteArray allocates a ByteArray of b.
func (h *fakeHeap) byteArray(b []byte) uint64 {
	o := h.object(h.l.typeByteArray, int(h.l.fixedData)+len(b))
	h.put(o, h.l.fixedLength, smiOf(int64(len(b))))
	h.bytes(o, h.l.fixedData, b)
	return o
}

// script allocates a Script named name with source.
func (h *fakeHeap) script(name, source uint64) uint64 {
	o := h.object(h.l.typeScript, int(h.l.scriptLineEnds)+8)
	h.put(o, h.l.scriptName, name)
	h.put(o, h.l.scriptSource, source)
	h.put(o, h.l.scriptLineEnds, h.undefined())
	return o
}

// scopeInfo allocates a function's ScopeInfo: flags, its context locals,
// then its own name and inferred name when given (0: none).
func (h *fakeHeap) scopeInfo(locals int, name, inferred uint64) uint64 {
	l := h.l
	var flags uint32 = 2 // a function scope
	slots := []uint64{0, smiOf(1), smiOf(int64(locals))}
	n := locals
	if uint64(locals) < l.scopeMaxInlinedLocals {
		n = 2 * locals
	} else {
		n = 1 + locals
	}
	for range n {
		slots = append(slots, smiOf(0))
	}
	if name != 0 {
		flags |= 1 << l.scopeFunctionVarShift
		slots = append(slots, name, smiOf(-1))
	}
	if inferred != 0 {
		flags |= 1 << l.scopeInferredBit
		slots = append(slots, inferred)
	}
	slots[0] = smiOf(int64(flags))
	o := h.object(l.typeScopeInfo, 8+8*len(slots))
	for i, s := range slots {
		h.put(o, 8+uint64(8*i), s)
	}
	return o
}

// function allocates a SharedFunctionInfo.
func (h *fakeHeap) function(nameOrScope, script, bytecode uint64) uint64 {
	o := h.object(h.l.typeSFI, int(h.l.sfiScript)+16)
	h.put(o, h.l.sfiNameOrScopeInfo, nameOrScope)
	h.put(o, h.l.sfiScript, script)
	h.put(o, h.l.sfiFunctionData, bytecode)
	return o
}

// bytecodeArray allocates a BytecodeArray of code, with positions.
func (h *fakeHeap) bytecodeArray(code []byte, positions uint64) uint64 {
	o := h.object(h.l.typeBytecodeArray, int(h.l.bytecodeData)+len(code))
	h.put(o, h.l.fixedLength, smiOf(int64(len(code))))
	h.put(o, h.l.bytecodeSourcePositions, positions)
	h.bytes(o, h.l.bytecodeData, code)
	return o
}

// code allocates a Code object of kind, with its InstructionStream of
// size bytes of instructions, the given deoptimization data (or
// bytecode) and position table; it returns the Code and where its
// instructions start.
func (h *fakeHeap) code(kind uint32, size int, deoptOrBytecode, positions uint64) (code, start uint64) {
	l := h.l
	// Pad so that instructions start 64-byte aligned, as V8's do.
	for (fakeBase+uint64(len(h.mem))+l.istreamHeader)%64 != 0 {
		h.alloc(8)
	}
	stream := h.object(l.typeInstructionStream, int(l.istreamHeader)+size)
	code = h.object(l.typeCode, int(l.codeInstructionSize)+8)
	start = stream - 1 + l.istreamHeader
	h.put(stream, l.istreamCode, code)
	h.put(code, l.codeInstructionStream, stream)
	h.put(code, l.codeInstructionStart, start)
	h.put32(code, l.codeFlags, kind<<l.codeKindShift)
	h.put32(code, l.codeInstructionSize, uint32(size))
	h.put(code, l.codeDeopt, deoptOrBytecode)
	h.put(code, l.codeSourcePositions, positions)
	return code, start
}

// memory is the heap as a process's memory.
func (h *fakeHeap) memory() *fakeMemory {
	return &fakeMemory{base: fakeBase, mem: append([]byte(nil), h.mem...)}
}

// encodePositions writes a source position table, as V8's
// SourcePositionTableBuilder does, of entries (code offset, script
// offset, inlining id), each a statement position.
func encodePositions(entries [][3]int64) []byte {
	var out []byte
	vlqw := func(v int64) {
		u := uint64(v<<1) ^ uint64(v>>63)
		for {
			b := byte(u & 0x7f)
			u >>= 7
			if u != 0 {
				out = append(out, b|0x80)
				continue
			}
			out = append(out, b)
			return
		}
	}
	code, pos := int64(-1), int64(0)
	for _, e := range entries {
		raw := int64(sourcePosition(e[1], e[2]))
		vlqw(e[0] - code)
		vlqw(raw - pos)
		code, pos = e[0], raw
	}
	return out
}

// sourcePosition encodes a script offset and inlining id.
func sourcePosition(offset, inlining int64) uint64 {
	return uint64(offset+1)<<posOffsetShift | uint64(inlining)<<posInliningShift
}

// chainHeap lays out crunch.js's chain: the three functions of one
// script, TurboFan code for the outer one with the other two inlined,
// and baseline code and bytecode for the leaf.
type chainHeap struct {
	h                       *fakeHeap
	leaf, middle, outer     uint64 // SharedFunctionInfos
	optimized, optStart     uint64
	baseline, baseStart     uint64
	leafBytecode            uint64
	source                  string
	leafPos, midPos, outPos int64 // script offsets of each function's hot spot
}

func newChainHeap(t testing.TB) *chainHeap {
	l := node20Layout(t)
	h := newFakeHeap(l)
	src := "function crunchLeaf(x) {\n  return x * 3;\n}\nfunction crunchMiddle(x) {\n  return crunchLeaf(x);\n}\nfunction crunchOuter(x) {\n  return crunchMiddle(x);\n}\n"
	c := &chainHeap{h: h, source: src}
	c.leafPos = int64(strings.Index(src, "x * 3"))
	c.midPos = int64(strings.Index(src, "crunchLeaf(x);"))
	c.outPos = int64(strings.Index(src, "crunchMiddle(x);"))
	sc := h.script(h.seqString("/srv/crunch.js"), h.seqString(src))
	// The leaf's bytecode: op 10 (3 bytes) at 0, op 20 (1 byte) at 3, op 10 at 4.
	c.leafBytecode = h.bytecodeArray([]byte{10, 0, 0, 20, 10, 0, 0},
		h.byteArray(encodePositions([][3]int64{{0, c.leafPos - 10, 0}, {3, c.leafPos, 0}, {4, c.leafPos + 4, 0}})))
	c.leaf = h.function(h.seqString("crunchLeaf"), sc, c.leafBytecode)
	c.middle = h.function(h.scopeInfo(1, h.seqString("crunchMiddle"), 0), sc, 0)
	c.outer = h.function(h.seqString("crunchOuter"), sc, 0)
	literals := h.fixedArray(l.typeWeakFixedArray, c.middle|2, c.leaf)
	var inlining []byte
	for _, e := range [][2]uint64{{sourcePosition(c.outPos, 0), 0}, {sourcePosition(c.midPos, 1), 1}} {
		rec := make([]byte, l.inliningSize)
		putLE64(rec, e[0])
		putLE32(rec[l.inliningFunction:], uint32(e[1]))
		inlining = append(inlining, rec...)
	}
	deopt := h.fixedArray(l.typeFixedArray, smiOf(0), smiOf(2), literals, 0, 0, 0, c.outer, h.byteArray(inlining))
	positions := h.byteArray(encodePositions([][3]int64{{0, c.outPos, 0}, {16, c.midPos, 1}, {32, c.leafPos, 2}, {48, c.outPos, 0}}))
	c.optimized, c.optStart = h.code(13, 64, deopt, positions)
	// Baseline code of the leaf: 5 bytes of prologue, then 8, 4 and 8
	// bytes for its three bytecodes.
	c.baseline, c.baseStart = h.code(l.codeKindBaseline, 25, 0, 0)
	c.h.put(c.baseline, l.codeBytecodeArray, c.leafBytecode)
	c.h.put(c.baseline, l.codeBytecodeOffset, h.byteArray([]byte{5, 8, 4, 8}))
	c.h.put(c.leaf, l.sfiFunctionData, c.baseline)
	return c
}

func putLE64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func putLE32(b []byte, v uint32) {
	for i := range 4 {
		b[i] = byte(v >> (8 * i))
	}
}

// instance makes an instance of a process whose memory is the heap.
func (c *chainHeap) instance() *instance {
	return &instance{
		client:  New(Config{}),
		serial:  1,
		heap:    heap{l: c.h.l, mem: c.h.memory()},
		codes:   newCodeRanges(16),
		located: lru.New[locatedKey, located](16, nil),
	}
}

// line returns the 1-based line and column of offset pos of the source.
func (c *chainHeap) line(pos int64) (int64, int64) {
	s := &script{}
	for i, ch := range c.source {
		if ch == '\n' {
			s.ends = append(s.ends, uint32(i))
		}
	}
	return s.position(pos)
}
