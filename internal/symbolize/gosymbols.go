package symbolize

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
)

// goSymbolTable answers lookups from a Go binary's .gopclntab.
type goSymbolTable struct {
	table *gosym.Table
	// inline expands inlined calls; nil when the tree cannot be read.
	inline *goInlineTree
}

// goPclntabSection returns the section holding the Go pc/line table. PIE
// binaries linked externally keep it in .data.rel.ro.gopclntab.
func goPclntabSection(f *elf.File) *elf.Section {
	if s := f.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		return s
	}
	if s := f.Section(".data.rel.ro.gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		return s
	}
	return nil
}

// maxPclntabSize bounds how much of a (possibly hostile) file is read into
// memory for one binary.
const maxPclntabSize = 512 << 20

// newGoSymbolTable parses the .gopclntab of f. symtab may be nil (stripped
// binary); it is only used to find runtime.text.
func newGoSymbolTable(f *elf.File, symtab []elf.Symbol) (t *goSymbolTable, err error) {
	sect := goPclntabSection(f)
	if sect == nil {
		return nil, errors.New("no .gopclntab section")
	}
	if sect.Size > maxPclntabSize {
		return nil, fmt.Errorf(".gopclntab is %d bytes, more than the %d limit", sect.Size, maxPclntabSize)
	}
	data, err := sect.Data()
	if err != nil {
		return nil, fmt.Errorf("reading .gopclntab: %w", err)
	}
	text := goTextStart(f, symtab, data)
	t, err = parseGoPclntab(data, text)
	if err != nil {
		return nil, err
	}
	mem := newELFMemory(f)
	t.inline = newGoInlineTree(data, text, goFuncBase(f, symtab, mem), mem)
	return t, nil
}

// parseGoPclntab decodes a .gopclntab whose functions are relative to
// textStart.
func parseGoPclntab(data []byte, textStart uint64) (t *goSymbolTable, err error) {
	if err := checkPclntabHeader(data); err != nil {
		return nil, err
	}
	// debug/gosym indexes slices with values read from the file; a corrupt
	// table must not take the profiler down.
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("decoding .gopclntab: %v", r)
		}
	}()
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, textStart))
	if err != nil {
		return nil, fmt.Errorf("decoding .gopclntab: %w", err)
	}
	if len(table.Funcs) == 0 {
		return nil, errors.New("decoding .gopclntab: no functions")
	}
	return &goSymbolTable{table: table}, nil
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
func goTextStart(f *elf.File, symtab []elf.Symbol, pclntab []byte) uint64 {
	for i := range symtab {
		if symtab[i].Name == "runtime.text" && symtab[i].Section != elf.SHN_UNDEF {
			return symtab[i].Value
		}
	}
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
	if v, ok := goTextStartFromRelocations(f, pclntab); ok && text != nil && v >= text.Addr && v < text.Addr+text.Size {
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
func goTextStartFromRelocations(f *elf.File, pclntab []byte) (uint64, bool) {
	if f.Class != elf.ELFCLASS64 || len(pclntab) < 8 || pclntab[7] != 8 {
		return 0, false
	}
	sect := goPclntabSection(f)
	if sect == nil {
		return 0, false
	}
	return goModuledataWordFromRelocations(f, sect.Addr, moduledataTextWord)
}

// lookup returns the frames for pc, leaf first: each inlined call, with
// the position inside it, then the physical function.
func (t *goSymbolTable) lookup(pc uint64) (frames []Frame, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			frames, ok = nil, false
		}
	}()
	file, line, fn := t.table.PCToLine(pc)
	if fn == nil || pc < fn.Entry || pc >= fn.End {
		return nil, false
	}
	// debug/gosym reports an unknown line as -1; Frame uses 0.
	leaf := Frame{Function: fn.Name, File: file, Line: int64(max(line, 0))}
	if t.inline != nil {
		positionAt := func(pc uint64) (string, int) {
			file, line, _ := t.table.PCToLine(pc)
			return file, line
		}
		if frames, ok := t.inline.expand(fn, pc, leaf, positionAt); ok {
			return frames, true
		}
	}
	return []Frame{leaf}, true
}

// functionRange returns the entry and end of the function containing pc.
func (t *goSymbolTable) functionRange(pc uint64) (start, end uint64, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			start, end, ok = 0, 0, false
		}
	}()
	fn := t.table.PCToFunc(pc)
	if fn == nil {
		return 0, 0, false
	}
	return fn.Entry, fn.End, true
}
