// Package gotable names addresses of Go binaries from their .gopclntab,
// which -ldflags='-s -w' keeps, with inlined calls from the inline tree
// the runtime keeps beside it (go:func.*).
package gotable

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/symbolize/elfsym"
	"github.com/bpfcol/bpfcol/internal/symbolize/sections"
)

// Table answers lookups from a Go binary's .gopclntab. Tables of Go
// 1.18 and later are read in place (pcln); older ones through debug/gosym,
// which materializes every function.
type Table struct {
	pcln  *goPclntab
	table *gosym.Table
	// inline expands inlined calls; nil when the tree cannot be read.
	inline *goInlineTree
}

// HasInline reports whether the inline tree was read: lookups then expand
// inlined calls.
func (t *Table) HasInline() bool { return t.inline != nil }

// maxPclntabSize bounds how much of a (possibly hostile) file is read into
// memory for one binary.
const maxPclntabSize = 512 << 20

// New reads the .gopclntab of img.
func New(img sections.Image) (t *Table, err error) {
	sect := elfbin.PclntabSection(img.F)
	if sect == nil {
		return nil, errors.New("no .gopclntab section")
	}
	if sect.Size > maxPclntabSize {
		return nil, fmt.Errorf(".gopclntab is %d bytes, more than the %d limit", sect.Size, maxPclntabSize)
	}
	data, _, err := img.Section(sect)
	if err != nil {
		return nil, fmt.Errorf("reading .gopclntab: %w", err)
	}
	text := goTextStart(img, data)
	t, err = Parse(data, text)
	if err != nil {
		return nil, err
	}
	mem := newELFMemory(img)
	t.inline = newGoInlineTree(data, text, goFuncBase(img, mem), mem)
	return t, nil
}

// Parse decodes a .gopclntab whose functions are relative to
// textStart.
func Parse(data []byte, textStart uint64) (t *Table, err error) {
	if err := checkPclntabHeader(data); err != nil {
		return nil, err
	}
	if p, ok := newGoPclntab(data, textStart); ok {
		if p.nfunc == 0 {
			return nil, errors.New("decoding .gopclntab: no functions")
		}
		return &Table{pcln: p}, nil
	}
	// debug/gosym indexes slices with values read from the file; a corrupt
	// table must not take the profiler down.
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, elfbin.Recovered(r, "decoding .gopclntab")
		}
	}()
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, textStart))
	if err != nil {
		return nil, fmt.Errorf("decoding .gopclntab: %w", err)
	}
	if len(table.Funcs) == 0 {
		return nil, errors.New("decoding .gopclntab: no functions")
	}
	return &Table{table: table}, nil
}

// minPclntabBytesPerFunc is a floor on the table bytes each function
// takes in every pclntab format (its functab entry alone is 8 bytes or
// more); real tables use far more.
const minPclntabBytesPerFunc = 16

// checkPclntabHeader rejects function and file counts the table cannot
// hold: debug/gosym allocates by them before reading anything, so a corrupt
// header would otherwise exhaust memory.
func checkPclntabHeader(data []byte) error {
	if len(data) < 8 {
		return errors.New("decoding .gopclntab: truncated header")
	}
	ptrSize := int(data[7])
	if ptrSize != 4 && ptrSize != 8 {
		return fmt.Errorf("decoding .gopclntab: pointer size %d", ptrSize)
	}
	if len(data) < 8+2*ptrSize {
		return errors.New("decoding .gopclntab: truncated header")
	}
	var order binary.ByteOrder = binary.LittleEndian
	if data[0] == 0xff { // magic stored big-endian
		order = binary.BigEndian
	}
	word := func(off int) uint64 {
		if ptrSize == 8 {
			return order.Uint64(data[off:])
		}
		return uint64(order.Uint32(data[off:]))
	}
	// Every format stores the function count right after the 8-byte
	// header; 1.16+ follow it with the file count.
	limit := uint64(len(data)) / minPclntabBytesPerFunc
	if n := word(8); n > limit {
		return fmt.Errorf("decoding .gopclntab: %d functions cannot fit in %d bytes", n, len(data))
	}
	if n := word(8 + ptrSize); n > uint64(len(data)) {
		return fmt.Errorf("decoding .gopclntab: %d files cannot fit in %d bytes", n, len(data))
	}
	return nil
}

// goTextStart finds the value of runtime.text, the base that .gopclntab's
// function offsets are relative to. It can differ from the .text section
// start when cgo puts C code first.
func goTextStart(img sections.Image, pclntab []byte) uint64 {
	if v, ok := elfsym.Value(img, "runtime.text"); ok {
		return v
	}
	f := img.F
	text := f.Section(".text")
	// Stripped binary: since Go 1.18 the pcHeader stores runtime.text after
	// magic, padding, quantum, ptrSize, nfunc and nfiles. In PIE files the
	// word may be left for a dynamic relocation, so only trust values that
	// fall inside .text.
	if len(pclntab) >= 8 {
		ptrSize := int(pclntab[7])
		off := 8 + 2*ptrSize
		if (ptrSize == 4 || ptrSize == 8) && len(pclntab) >= off+ptrSize {
			var v uint64
			if ptrSize == 8 {
				v = f.ByteOrder.Uint64(pclntab[off:])
			} else {
				v = uint64(f.ByteOrder.Uint32(pclntab[off:]))
			}
			if text != nil && v >= text.Addr && v < text.Addr+text.Size {
				return v
			}
		}
	}
	// PIE: the linker leaves that word zero and only runtime.firstmoduledata
	// carries runtime.text, through dynamic relocations.
	if v, ok := goTextStartFromRelocations(img, pclntab); ok && text != nil && v >= text.Addr && v < text.Addr+text.Size {
		return v
	}
	if text != nil {
		return text.Addr
	}
	return 0
}

// moduledataTextWord is the index of moduledata.text in pointer-sized words:
// pcHeader, five slices (funcnametab, cutab, filetab, pctab, pclntable),
// ftab, findfunctab, minpc, maxpc, then text. Stable since Go 1.18.
const moduledataTextWord = 1 + 3*6 + 1 + 2

// goTextStartFromRelocations finds runtime.text in a PIE Go binary: the
// R_*_RELATIVE relocation whose addend is the .gopclntab address fills
// moduledata.pcHeader, and the one moduledataTextWord words later fills
// moduledata.text.
func goTextStartFromRelocations(img sections.Image, pclntab []byte) (uint64, bool) {
	if img.F.Class != elf.ELFCLASS64 || len(pclntab) < 8 || pclntab[7] != 8 {
		return 0, false
	}
	sect := elfbin.PclntabSection(img.F)
	if sect == nil {
		return 0, false
	}
	return goModuledataWordFromRelocations(img, sect.Addr, moduledataTextWord)
}

// Lookup returns the frames for pc, leaf first: each inlined call, with
// the position inside it, then the physical function.
func (t *Table) Lookup(pc uint64) (frames []frame.Line, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			_ = elfbin.Recovered(r, "looking up .gopclntab")
			frames, ok = nil, false
		}
	}()
	if t.pcln != nil {
		fn, ok := t.pcln.findFunc(pc)
		if !ok {
			return nil, false
		}
		file, line := t.pcln.position(fn, pc)
		leaf := frame.Line{Name: t.pcln.funcName(fn), File: file, Line: int64(max(line, 0))}
		if t.inline != nil {
			if frames, ok := t.inline.expand(fn, pc, leaf); ok {
				return frames, true
			}
		}
		return []frame.Line{leaf}, true
	}
	file, line, fn := t.table.PCToLine(pc)
	if fn == nil || pc < fn.Entry || pc >= fn.End {
		return nil, false
	}
	// debug/gosym reports an unknown line as -1; frame.Line uses 0.
	return []frame.Line{{Name: fn.Name, File: file, Line: int64(max(line, 0))}}, true
}

// FunctionRange returns the entry and end of the function containing pc.
func (t *Table) FunctionRange(pc uint64) (start, end uint64, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			_ = elfbin.Recovered(r, "looking up .gopclntab")
			start, end, ok = 0, 0, false
		}
	}()
	if t.pcln != nil {
		fn, ok := t.pcln.findFunc(pc)
		if !ok {
			return 0, 0, false
		}
		return fn.entry, fn.end, true
	}
	fn := t.table.PCToFunc(pc)
	if fn == nil {
		return 0, 0, false
	}
	return fn.Entry, fn.End, true
}

// LookupFunc returns the entry and end of the function called name.
func (t *Table) LookupFunc(name string) (start, end uint64, ok bool) {
	if t.pcln != nil {
		return t.pcln.lookupName(name)
	}
	if fn := t.table.LookupFunc(name); fn != nil {
		return fn.Entry, fn.End, true
	}
	return 0, 0, false
}

// goPclntab reads a Go 1.18+ .gopclntab in place (runtime/symtab.go's
// pcHeader, functab and _func): a lookup is a binary search of the
// function table and the decoding of two pc-value tables.
type goPclntab struct {
	order       binary.ByteOrder
	quantum     uint64
	textStart   uint64
	funcnametab []byte
	cutab       []byte
	filetab     []byte
	pctab       []byte
	pclntable   []byte
	ftab        []byte // nfunc+1 (entryoff, funcoff) pairs
	nfunc       int
	headerSize  int // of _func, up to and including nfuncdata
	ver120      bool
}

// Magic numbers of the pcHeader (internal/abi/symtab.go).
const (
	goMagic118 = 0xfffffff0
	goMagic120 = 0xfffffff1
)

// newGoPclntab reads the pcHeader of data; ok is false for formats other
// than Go 1.18's and 1.20's (which later releases keep), or a header that
// does not fit.
func newGoPclntab(data []byte, textStart uint64) (*goPclntab, bool) {
	if len(data) < 8 || data[4] != 0 || data[5] != 0 {
		return nil, false
	}
	p := &goPclntab{order: binary.LittleEndian}
	magic := binary.LittleEndian.Uint32(data)
	if magic != goMagic118 && magic != goMagic120 {
		p.order = binary.BigEndian
		if magic = binary.BigEndian.Uint32(data); magic != goMagic118 && magic != goMagic120 {
			return nil, false
		}
	}
	ptr := int(data[7])
	if ptr != 8 && ptr != 4 || len(data) < 8+8*ptr {
		return nil, false
	}
	word := func(i int) uint64 {
		if ptr == 8 {
			return p.order.Uint64(data[8+i*8:])
		}
		return uint64(p.order.Uint32(data[8+i*4:]))
	}
	part := func(i int) []byte {
		off := word(i)
		if off > uint64(len(data)) {
			return nil
		}
		return data[off:]
	}
	p.quantum = uint64(max(data[6], 1))
	p.textStart = textStart
	p.funcnametab, p.cutab, p.filetab, p.pctab, p.pclntable = part(3), part(4), part(5), part(6), part(7)
	p.ver120 = magic == goMagic120
	p.headerSize = 40
	if p.ver120 {
		p.headerSize = goFuncHeaderSize
	}
	nfunc := word(0)
	if p.funcnametab == nil || p.cutab == nil || p.filetab == nil || p.pctab == nil || p.pclntable == nil ||
		nfunc > uint64(len(p.pclntable))/8-1 || len(p.pclntable) < 8 {
		return nil, false
	}
	p.nfunc = int(nfunc)
	p.ftab = p.pclntable[:(p.nfunc+1)*8]
	return p, true
}

// goFunc is one function of the table: its bounds and its _func record.
type goFunc struct {
	entry, end uint64
	rec        []byte
}

func (p *goPclntab) entryOff(i int) uint64 { return uint64(p.order.Uint32(p.ftab[i*8:])) }

// funcAtIndex returns function i, ok false when its record is outside the
// table.
func (p *goPclntab) funcAtIndex(i int) (goFunc, bool) {
	funcOff := uint64(p.order.Uint32(p.ftab[i*8+4:]))
	if funcOff > uint64(len(p.pclntable)) || uint64(len(p.pclntable))-funcOff < uint64(p.headerSize) {
		return goFunc{}, false
	}
	return goFunc{
		entry: p.textStart + p.entryOff(i),
		end:   p.textStart + p.entryOff(i+1),
		rec:   p.pclntable[funcOff:],
	}, true
}

// findFunc returns the function containing pc.
func (p *goPclntab) findFunc(pc uint64) (goFunc, bool) {
	if pc < p.textStart || p.nfunc == 0 {
		return goFunc{}, false
	}
	off := pc - p.textStart
	if off < p.entryOff(0) || off >= p.entryOff(p.nfunc) {
		return goFunc{}, false
	}
	i := sort.Search(p.nfunc, func(i int) bool { return p.entryOff(i) > off }) - 1
	if i < 0 {
		return goFunc{}, false
	}
	fn, ok := p.funcAtIndex(i)
	if !ok || pc >= fn.end {
		return goFunc{}, false
	}
	return fn, true
}

// funcByEntry returns the function starting at entry.
func (p *goPclntab) funcByEntry(entry uint64) (goFunc, bool) {
	fn, ok := p.findFunc(entry)
	if !ok || fn.entry != entry {
		return goFunc{}, false
	}
	return fn, true
}

func (p *goPclntab) field(fn goFunc, off int) uint32 { return p.order.Uint32(fn.rec[off:]) }

// funcName returns the name of fn.
func (p *goPclntab) funcName(fn goFunc) string {
	return string(p.nameAt(int32(p.field(fn, 4))))
}

// nameAt reads a NUL-terminated function name at off in funcnametab.
func (p *goPclntab) nameAt(off int32) []byte {
	if off < 0 {
		return nil
	}
	return elfsym.CString(p.funcnametab, uint32(off))
}

// position returns the file and line at pc in fn; line is -1 when unknown.
func (p *goPclntab) position(fn goFunc, pc uint64) (string, int) {
	line, ok := p.pcValue(p.field(fn, 24), fn.entry, pc)
	if !ok {
		line = -1
	}
	return p.fileAt(fn, pc), int(line)
}

// fileAt returns the source file at pc in fn, "" when unknown.
func (p *goPclntab) fileAt(fn goFunc, pc uint64) string {
	fileno, ok := p.pcValue(p.field(fn, 20), fn.entry, pc)
	if !ok || fileno < 0 {
		return ""
	}
	i := uint64(p.field(fn, 32)) + uint64(fileno)
	if i >= uint64(len(p.cutab))/4 {
		return ""
	}
	off := p.order.Uint32(p.cutab[i*4:])
	if off == ^uint32(0) {
		return ""
	}
	return string(elfsym.CString(p.filetab, off))
}

// pcValue decodes the pc-value table at off for the function at entry and
// returns the value at pc (runtime.pcvalue), ok false when pc is outside.
func (p *goPclntab) pcValue(off uint32, entry, pc uint64) (int32, bool) {
	if off == 0 || uint64(off) >= uint64(len(p.pctab)) {
		return 0, false
	}
	b := p.pctab[off:]
	val, cur := int32(-1), entry
	for {
		uv, n := binary.Uvarint(b)
		if n <= 0 || uv > 0xffffffff || (uv == 0 && cur != entry) {
			return 0, false
		}
		b = b[n:]
		val += int32(-(uint32(uv) & 1) ^ (uint32(uv) >> 1))
		pcDelta, n := binary.Uvarint(b)
		if n <= 0 || pcDelta > 0xffffffff {
			return 0, false
		}
		b = b[n:]
		cur += pcDelta * p.quantum
		if pc < cur {
			return val, true
		}
	}
}

// lookupName finds the function called name, scanning the table in place.
func (p *goPclntab) lookupName(name string) (start, end uint64, ok bool) {
	for i := range p.nfunc {
		fn, ok := p.funcAtIndex(i)
		if ok && string(p.nameAt(int32(p.field(fn, 4)))) == name {
			return fn.entry, fn.end, true
		}
	}
	return 0, 0, false
}
