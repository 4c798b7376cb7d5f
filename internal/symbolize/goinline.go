package symbolize

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"io"
)

// goInlineTree expands a Go frame into its inlined calls through the
// function's _FUNCDATA_InlTree and _PCDATA_InlTreeIndex (Go 1.20+ tables,
// runtime/symtabinl.go). It reads the same .gopclntab as debug/gosym plus
// the inline tree entries, which live in go:func.* in .rodata, so it works
// on stripped binaries.
type goInlineTree struct {
	order       binary.ByteOrder
	quantum     uint64
	textStart   uint64
	funcnametab []byte
	pctab       []byte
	pclntable   []byte
	ftab        []byte // nfunc+1 (entryoff, funcoff) pairs
	nfunc       int
	gofunc      uint64
	mem         io.ReaderAt // the file's memory image, at virtual addresses
}

// Go's ABI constants (internal/abi/symtab.go) and record sizes.
const (
	goPCDataInlTreeIndex = 2
	goFuncDataInlTree    = 3
	goFuncHeaderSize     = 44 // runtime._func up to and including nfuncdata
	goInlinedCallSize    = 16 // runtime.inlinedCall
	goMagic120           = 0xfffffff1
	// maxInlineDepth bounds a chain walk in a corrupt tree.
	maxInlineDepth = 64
	// moduledataGofuncWord is the index of moduledata.gofunc in pointer
	// words (runtime/symtab.go, Go 1.20 to 1.26): see moduledataTextWord,
	// then etext, four section pairs, covctrs pair, end, gcdata, gcbss,
	// types, etypes, rodata.
	moduledataGofuncWord = moduledataTextWord + 18
)

// newGoInlineTree reads the pcHeader of data (the .gopclntab contents) and
// returns nil when the format or the go:func.* base is unknown.
func newGoInlineTree(data []byte, textStart, gofunc uint64, mem io.ReaderAt) *goInlineTree {
	if len(data) < 8 || gofunc == 0 || mem == nil {
		return nil
	}
	order := binary.ByteOrder(binary.LittleEndian)
	if binary.LittleEndian.Uint32(data) != goMagic120 {
		if binary.BigEndian.Uint32(data) != goMagic120 {
			return nil
		}
		order = binary.BigEndian
	}
	ptr := int(data[7])
	if ptr != 8 && ptr != 4 || len(data) < 8+8*ptr {
		return nil
	}
	word := func(i int) uint64 {
		if ptr == 8 {
			return order.Uint64(data[8+i*8:])
		}
		return uint64(order.Uint32(data[8+i*4:]))
	}
	part := func(i int) []byte {
		off := word(i)
		if off > uint64(len(data)) {
			return nil
		}
		return data[off:]
	}
	t := &goInlineTree{
		order:       order,
		quantum:     uint64(max(data[6], 1)),
		textStart:   textStart,
		funcnametab: part(3),
		pctab:       part(6),
		pclntable:   part(7),
		gofunc:      gofunc,
		mem:         mem,
	}
	nfunc := word(0)
	if t.funcnametab == nil || t.pctab == nil || t.pclntable == nil || nfunc == 0 || nfunc > uint64(len(t.pclntable))/8-1 {
		return nil
	}
	t.nfunc = int(nfunc)
	t.ftab = t.pclntable[:(t.nfunc+1)*8]
	return t
}

// funcAt returns the _func record of the function at entry.
func (t *goInlineTree) funcAt(entry uint64) []byte {
	if entry < t.textStart {
		return nil
	}
	off := entry - t.textStart
	lo, hi := 0, t.nfunc
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if uint64(t.order.Uint32(t.ftab[m*8:])) > off {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 || uint64(t.order.Uint32(t.ftab[(lo-1)*8:])) != off {
		return nil
	}
	funcOff := uint64(t.order.Uint32(t.ftab[(lo-1)*8+4:]))
	if funcOff+goFuncHeaderSize > uint64(len(t.pclntable)) {
		return nil
	}
	return t.pclntable[funcOff:]
}

// pcValue decodes the pc-value table at off for the function at entry and
// returns the value at pc (runtime.pcvalue), ok false when pc is outside.
func (t *goInlineTree) pcValue(off uint32, entry, pc uint64) (int32, bool) {
	if off == 0 || uint64(off) >= uint64(len(t.pctab)) {
		return 0, false
	}
	p := t.pctab[off:]
	val, cur := int32(-1), entry
	for {
		uv, n := binary.Uvarint(p)
		if n <= 0 || uv > 0xffffffff || (uv == 0 && cur != entry) {
			return 0, false
		}
		p = p[n:]
		val += int32(-(uint32(uv) & 1) ^ (uint32(uv) >> 1))
		pcDelta, n := binary.Uvarint(p)
		if n <= 0 || pcDelta > 0xffffffff {
			return 0, false
		}
		p = p[n:]
		cur += pcDelta * t.quantum
		if pc < cur {
			return val, true
		}
	}
}

// name reads a NUL-terminated function name at off in funcnametab.
func (t *goInlineTree) name(off int32) string {
	if off < 0 || int64(off) >= int64(len(t.funcnametab)) {
		return ""
	}
	s := t.funcnametab[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return string(s[:i])
	}
	return ""
}

// expand returns the frames at pc in fn, inlined calls first and fn last.
// leaf is the innermost position at pc; positionAt gives it elsewhere.
// ok is false when fn has no inlined call at pc.
func (t *goInlineTree) expand(fn *gosym.Func, pc uint64, leaf Frame, positionAt func(uint64) (string, int)) ([]Frame, bool) {
	rec := t.funcAt(fn.Entry)
	if rec == nil {
		return nil, false
	}
	npcdata := uint64(t.order.Uint32(rec[28:]))
	nfuncdata := uint64(rec[43])
	if npcdata <= goPCDataInlTreeIndex || nfuncdata <= goFuncDataInlTree ||
		goFuncHeaderSize+4*(npcdata+nfuncdata) > uint64(len(rec)) {
		return nil, false
	}
	idxTable := t.order.Uint32(rec[goFuncHeaderSize+4*goPCDataInlTreeIndex:])
	treeOff := t.order.Uint32(rec[goFuncHeaderSize+4*(npcdata+goFuncDataInlTree):])
	if treeOff == ^uint32(0) {
		return nil, false
	}
	ix, ok := t.pcValue(idxTable, fn.Entry, pc)
	if !ok || ix < 0 {
		return nil, false
	}
	frames := []Frame{leaf}
	var call [goInlinedCallSize]byte
	for ix >= 0 {
		if len(frames) > maxInlineDepth {
			return nil, false
		}
		addr := t.gofunc + uint64(treeOff) + uint64(ix)*goInlinedCallSize
		if _, err := t.mem.ReadAt(call[:], int64(addr)); err != nil || int64(addr) < 0 {
			return nil, false
		}
		frames[len(frames)-1].Function = t.name(int32(t.order.Uint32(call[4:])))
		parentPC := fn.Entry + uint64(int64(int32(t.order.Uint32(call[8:]))))
		if parentPC < fn.Entry || parentPC >= fn.End {
			return nil, false
		}
		file, line := positionAt(parentPC)
		frames = append(frames, Frame{File: file, Line: int64(max(line, 0))})
		if ix, ok = t.pcValue(idxTable, fn.Entry, parentPC); !ok {
			return nil, false
		}
	}
	frames[len(frames)-1].Function = fn.Name
	return frames, true
}

// elfMemory reads an ELF file's allocated sections at their virtual
// addresses.
type elfMemory struct{ sects []*elf.Section }

func newELFMemory(f *elf.File) *elfMemory {
	m := &elfMemory{}
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Type != elf.SHT_NOBITS && s.Flags&elf.SHF_COMPRESSED == 0 {
			m.sects = append(m.sects, s)
		}
	}
	return m
}

func (m *elfMemory) ReadAt(p []byte, addr int64) (int, error) {
	a := uint64(addr)
	for _, s := range m.sects {
		if a >= s.Addr && a-s.Addr < s.Size && uint64(len(p)) <= s.Size-(a-s.Addr) {
			return s.ReadAt(p, int64(a-s.Addr))
		}
	}
	return 0, io.ErrUnexpectedEOF
}

// goFuncBase finds go:func.*, the base of funcdata offsets: from the symbol
// table when there is one, else from runtime.firstmoduledata, found as the
// word pointing at .gopclntab (through a relocation in PIE files).
func goFuncBase(f *elf.File, symtab []elf.Symbol, mem io.ReaderAt) uint64 {
	for i := range symtab {
		if (symtab[i].Name == "go:func.*" || symtab[i].Name == "go.func.*") && symtab[i].Section != elf.SHN_UNDEF {
			return symtab[i].Value
		}
	}
	pcln := goPclntabSection(f)
	if pcln == nil || f.Class != elf.ELFCLASS64 {
		return 0
	}
	if v, ok := goModuledataWordFromRelocations(f, pcln.Addr, moduledataGofuncWord); ok {
		return v
	}
	// Non-PIE: the words are in the file.
	var w [8]byte
	// Go 1.26 keeps it in its own .go.module section.
	for _, name := range [...]string{".go.module", ".noptrdata", ".data"} {
		s := f.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS || s.Size > 64<<20 {
			continue
		}
		data, err := s.Data()
		if err != nil {
			continue
		}
		for off := 0; off+8 <= len(data); off += 8 {
			if f.ByteOrder.Uint64(data[off:]) != pcln.Addr {
				continue
			}
			md := s.Addr + uint64(off)
			if _, err := mem.ReadAt(w[:], int64(md+moduledataGofuncWord*8)); err == nil {
				if v := f.ByteOrder.Uint64(w[:]); v != 0 {
					return v
				}
			}
		}
	}
	return 0
}

// goModuledataWordFromRelocations returns, in a PIE Go binary, the value
// the dynamic linker stores in word index of runtime.firstmoduledata: the
// addend of the R_*_RELATIVE relocation there.
func goModuledataWordFromRelocations(f *elf.File, pclntabAddr uint64, index uint64) (uint64, bool) {
	var relative uint32
	switch f.Machine {
	case elf.EM_X86_64:
		relative = uint32(elf.R_X86_64_RELATIVE)
	case elf.EM_AARCH64:
		relative = uint32(elf.R_AARCH64_RELATIVE)
	default:
		return 0, false
	}
	var relas [][]byte
	for _, rs := range f.Sections {
		if rs.Type != elf.SHT_RELA || rs.Entsize != 24 || rs.Size > 256<<20 {
			continue
		}
		if data, err := rs.Data(); err == nil {
			relas = append(relas, data)
		}
	}
	slots := map[uint64]bool{}
	var found uint64
	ok := false
	for pass := 0; pass < 2 && !ok; pass++ {
		for _, data := range relas {
			for i := 0; i+24 <= len(data); i += 24 {
				if elf.R_TYPE64(f.ByteOrder.Uint64(data[i+8:])) != relative {
					continue
				}
				off, addend := f.ByteOrder.Uint64(data[i:]), f.ByteOrder.Uint64(data[i+16:])
				if pass == 0 && addend == pclntabAddr && len(slots) < 16 {
					slots[off+index*8] = true
				}
				if pass == 1 && slots[off] {
					found, ok = addend, true
					break
				}
			}
		}
	}
	return found, ok
}
