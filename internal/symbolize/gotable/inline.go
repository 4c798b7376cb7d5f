package gotable

import (
	"debug/elf"
	"io"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/symbolize/elfsym"
	"github.com/bpfcol/bpfcol/internal/symbolize/sections"
)

// goInlineTree expands a Go frame into its inlined calls through the
// function's _FUNCDATA_InlTree and _PCDATA_InlTreeIndex (Go 1.20+ tables,
// runtime/symtabinl.go). It reads the same .gopclntab as the function
// table plus the inline tree entries, which live in go:func.* in .rodata,
// so it works on stripped binaries.
type goInlineTree struct {
	p      *goPclntab
	gofunc uint64
	mem    io.ReaderAt // the file's memory image, at virtual addresses
}

// Go's ABI constants (internal/abi/symtab.go) and record sizes.
const (
	goPCDataInlTreeIndex = 2
	goFuncDataInlTree    = 3
	goFuncHeaderSize     = 44 // runtime._func up to and including nfuncdata
	goInlinedCallSize    = 16 // runtime.inlinedCall
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
	if gofunc == 0 || mem == nil {
		return nil
	}
	p, ok := newGoPclntab(data, textStart)
	if !ok || !p.ver120 || p.nfunc == 0 {
		return nil
	}
	return &goInlineTree{p: p, gofunc: gofunc, mem: mem}
}

// expand returns the frames at pc in fn, inlined calls first and fn last.
// leaf is the innermost position at pc. ok is false when fn has no inlined
// call at pc.
func (t *goInlineTree) expand(fn goFunc, pc uint64, leaf frame.Line) ([]frame.Line, bool) {
	p := t.p
	rec, ok := p.funcByEntry(fn.entry)
	if !ok {
		return nil, false
	}
	npcdata := uint64(p.field(rec, 28))
	nfuncdata := uint64(rec.rec[43])
	if npcdata <= goPCDataInlTreeIndex || nfuncdata <= goFuncDataInlTree ||
		goFuncHeaderSize+4*(npcdata+nfuncdata) > uint64(len(rec.rec)) {
		return nil, false
	}
	idxTable := p.order.Uint32(rec.rec[goFuncHeaderSize+4*goPCDataInlTreeIndex:])
	treeOff := p.order.Uint32(rec.rec[goFuncHeaderSize+4*(npcdata+goFuncDataInlTree):])
	if treeOff == ^uint32(0) {
		return nil, false
	}
	ix, ok := p.pcValue(idxTable, fn.entry, pc)
	if !ok || ix < 0 {
		return nil, false
	}
	frames := []frame.Line{leaf}
	var call [goInlinedCallSize]byte
	for ix >= 0 {
		if len(frames) > maxInlineDepth {
			return nil, false
		}
		addr := t.gofunc + uint64(treeOff) + uint64(ix)*goInlinedCallSize
		if _, err := t.mem.ReadAt(call[:], int64(addr)); err != nil || int64(addr) < 0 {
			return nil, false
		}
		frames[len(frames)-1].Name = string(p.nameAt(int32(p.order.Uint32(call[4:]))))
		parentPC := fn.entry + uint64(int64(int32(p.order.Uint32(call[8:]))))
		if parentPC < fn.entry || parentPC >= fn.end {
			return nil, false
		}
		file, line := p.position(fn, parentPC)
		frames = append(frames, frame.Line{File: file, Line: int64(max(line, 0))})
		if ix, ok = p.pcValue(idxTable, fn.entry, parentPC); !ok {
			return nil, false
		}
	}
	frames[len(frames)-1].Name = p.funcName(fn)
	return frames, true
}

// elfMemory reads an ELF file's allocated sections at their virtual
// addresses.
type elfMemory struct {
	img   sections.Image
	sects []*elf.Section
}

func newELFMemory(img sections.Image) *elfMemory {
	m := &elfMemory{img: img}
	for _, s := range img.F.Sections {
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
			if d := m.img.Data; d != nil && s.Offset <= uint64(len(d)) && s.Offset+a-s.Addr+uint64(len(p)) <= uint64(len(d)) {
				return copy(p, d[s.Offset+a-s.Addr:]), nil
			}
			return s.ReadAt(p, int64(a-s.Addr))
		}
	}
	return 0, io.ErrUnexpectedEOF
}

// goFuncBase finds go:func.*, the base of funcdata offsets: from the symbol
// table when there is one, else from runtime.firstmoduledata, found as the
// word pointing at .gopclntab (through a relocation in PIE files).
func goFuncBase(img sections.Image, mem io.ReaderAt) uint64 {
	for _, name := range [...]string{"go:func.*", "go.func.*"} {
		if v, ok := elfsym.Value(img, name); ok {
			return v
		}
	}
	f := img.F
	pcln := elfbin.PclntabSection(f)
	if pcln == nil || f.Class != elf.ELFCLASS64 {
		return 0
	}
	if v, ok := goModuledataWordFromRelocations(img, pcln.Addr, moduledataGofuncWord); ok {
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
		data, _, err := img.Section(s)
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
func goModuledataWordFromRelocations(img sections.Image, pclntabAddr uint64, index uint64) (uint64, bool) {
	f := img.F
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
		if data, _, err := img.Section(rs); err == nil {
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
