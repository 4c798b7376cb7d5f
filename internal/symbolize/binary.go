package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/symbolize/debugfiles"
	"github.com/bpfcol/bpfcol/internal/symbolize/dwarfsym"
	"github.com/bpfcol/bpfcol/internal/symbolize/elfsym"
	"github.com/bpfcol/bpfcol/internal/symbolize/gotable"
	"github.com/bpfcol/bpfcol/internal/symbolize/sections"
)

// maxReadCode bounds one ReadCode call.
const maxReadCode = 1 << 20

// Binary is one opened ELF file. OpenBinary reads only headers and notes;
// symbol tables are parsed on the first lookup. Its methods are safe for
// concurrent use.
//
// A Binary is reference counted: OpenBinary's caller holds the first
// reference and gives it up with Close; readers handed out by BinaryCache.Get
// give theirs up with Release. The file is closed when the last reference is
// gone.
type Binary struct {
	f      *elfbin.File // the file, mapped when it could be
	id     uint64       // names the Binary's entries in tables
	tables *Tables      // holds the parsed symbol tables

	refs      atomic.Int64
	closeOnce sync.Once

	symbolsOnce sync.Once
	goSyms      *gotable.Table // nil when not Go or .gopclntab is unusable
	elfSyms     *elfSymbols    // nil when there is no usable symbol table
	symbolsErr  error

	dwarfOnce sync.Once
	dwarf     *dwarfsym.Index // nil when there is no usable DWARF
	dwarfErr  error

	// spilled are the compressed sections decompressed to disk, mapped
	// until the last reference is gone.
	spilled spilledSections

	byName nameIndex // functions by name, for LookupFunction

	parsedSize atomic.Int64 // estimated heap of the parsed tables
}

// OpenBinary reads the ELF headers and notes of f, whose parsed tables are
// then held in tables. It takes ownership of f: f is closed on error, and
// by Close otherwise.
func OpenBinary(f *os.File, tables *Tables) (*Binary, error) {
	ef, err := elfbin.Open(f)
	if err != nil {
		return nil, err
	}
	b := &Binary{f: ef, id: binaryIDs.Add(1), tables: tables}
	if tables != nil {
		b.spilled.spill = &tables.spill
	}
	b.refs.Store(1)
	return b, nil
}

// Close gives up the opener's reference; the file is closed once no reader
// holds the Binary any more. Calling Close more than once is harmless.
func (b *Binary) Close() error {
	var err error
	b.closeOnce.Do(func() { err = b.release() })
	return err
}

// Release gives up a reference taken by BinaryCache.Get.
func (b *Binary) Release() {
	_ = b.release()
}

// acquire takes a reader reference. The caller must already hold one (the
// cache's), so the count cannot be zero here.
func (b *Binary) acquire() { b.refs.Add(1) }

func (b *Binary) release() error {
	switch n := b.refs.Add(-1); {
	case n == 0:
		b.tables.dropBinary(b.id)
		b.spilled.close()
		return b.f.Close()
	case n < 0:
		return errors.New("releasing binary: more releases than references")
	}
	return nil
}

// BuildIDGNU returns the NT_GNU_BUILD_ID note in lowercase hex, "" if none.
func (b *Binary) BuildIDGNU() string { return b.f.IDs.GNU }

// BuildIDGo returns the Go build id from the Go note, "" if none.
func (b *Binary) BuildIDGo() string { return b.f.IDs.Go }

// IsGo reports whether the binary was built by the Go toolchain.
func (b *Binary) IsGo() bool { return b.f.IsGo }

// Mapper returns the file offset to virtual address mapper of the binary.
func (b *Binary) Mapper() *elfbin.AddressMapper { return b.f.Addrs }

// image is the file's headers and mapping.
func (b *Binary) image() elfImage {
	return newELFImage(sections.Image{F: b.f.ELF, Data: b.f.Data}, &b.spilled)
}

// loadSymbols finds the usable symbol tables once. .gopclntab is read in
// place; .symtab (else .dynsym) is indexed in the table cache.
func (b *Binary) loadSymbols() {
	b.symbolsOnce.Do(func() {
		defer elfbin.GuardFaults()()
		img := b.image()
		var goErr error
		if b.f.IsGo {
			b.goSyms, goErr = gotable.New(img.Image)
		}
		var symErr error
		for _, typ := range [...]elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
			r, _, ok := elfsym.Symbols(img.Image, typ)
			if !ok || r.Count() <= 1 {
				continue
			}
			// A .symtab without functions leaves .dynsym untried.
			h := &elfSymbols{id: b.id, tables: b.tables, typ: typ, img: img}
			switch {
			case b.goSyms != nil:
				// .gopclntab names the Go code; the table is built only
				// when a lookup falls outside it (cgo, assembly), and an
				// empty one answers no lookup, as none would.
				b.elfSyms = h
			case func() bool { t := h.table(); return t == nil || t.Len() == 0 }():
				symErr = fmt.Errorf("no function symbols in %s", typ)
			default:
				b.elfSyms = h
			}
			break
		}
		if b.elfSyms == nil && symErr == nil {
			symErr = elf.ErrNoSymbols
		}
		if b.goSyms == nil && b.elfSyms == nil {
			b.symbolsErr = errors.Join(errors.New("no usable symbol table"), symErr, goErr)
		}
	})
}

// elfSymbols is the index of a binary's .symtab or .dynsym, held in the
// table cache and built again from the mapped file after eviction.
type elfSymbols struct {
	id     uint64
	tables *Tables
	typ    elf.SectionType
	img    elfImage
}

func (h *elfSymbols) table() *elfsym.Table {
	return h.tables.get(tableKey{binary: h.id, kind: kindSymtab}, h.img.Data, func() (any, int64) {
		r, strtab, ok := elfsym.Symbols(h.img.Image, h.typ)
		if !ok {
			return (*elfsym.Table)(nil), 64
		}
		t := elfsym.Build(r, strtab)
		cost := t.Cost()
		if h.img.Data == nil {
			cost += int64(cap(strtab)) // a heap copy, not the mapping
		}
		return t, cost
	}).(*elfsym.Table)
}

// lookup returns the function covering addr.
func (h *elfSymbols) lookup(addr uint64) (elfsym.Func, bool) {
	if h == nil {
		return elfsym.Func{}, false
	}
	return h.table().Lookup(addr)
}

// loadDWARF indexes the DWARF once; compile units are parsed on lookup.
func (b *Binary) loadDWARF() {
	b.dwarfOnce.Do(func() {
		defer elfbin.GuardFaults()()
		var spill dwarfsym.Spill
		if b.spilled.to() != nil {
			spill = &b.spilled
		}
		b.dwarf, b.dwarfErr = dwarfsym.Open(b.image().Image, binaryTables{t: b.tables, id: b.id}, spill)
	})
}

// Symbolize names the ELF virtual address vaddr. Go binaries are resolved
// through .gopclntab (which survives -ldflags='-s -w'); everything else, and
// addresses outside Go code such as cgo's C functions, through DWARF
// (function, file:line and inlined calls), then .symtab, falling back to
// .dynsym. C++ and Rust names are demangled. Frames are leaf first, the
// physical function last. ok is false when nothing covers vaddr.
func (b *Binary) Symbolize(vaddr uint64) (frames []frame.Line, ok bool) {
	defer elfbin.GuardFaults()()
	defer func() {
		if r := recover(); r != nil {
			_ = elfbin.Recovered(r, "symbolizing")
			frames, ok = nil, false
		}
	}()
	b.loadSymbols()
	if b.goSyms != nil {
		if frames, ok := b.goSyms.Lookup(vaddr); ok {
			return frames, true
		}
	}
	b.loadDWARF()
	sym, hasSym := b.elfSyms.lookup(vaddr)
	if b.dwarf != nil {
		if frames, ok := b.dwarf.Lookup(vaddr); ok {
			// The physical function takes its name from the symbol table
			// when it has one: that names clones (.constprop, .cold) and
			// out-of-line template instances exactly, as llvm-symbolizer
			// does.
			if last := &frames[len(frames)-1]; hasSym {
				last.Name, last.SystemName = elfsym.Names(sym.Name)
			}
			return frames, true
		}
	}
	if hasSym {
		fr := frame.Line{File: sym.File}
		fr.Name, fr.SystemName = elfsym.Names(sym.Name)
		return []frame.Line{fr}, true
	}
	return nil, false
}

// DropPages takes the pages of the mapped file read so far out of the
// process's RSS; they stay in the page cache, and later lookups fault in
// the few they read. Callers that looked up many addresses at once call
// it after.
func (b *Binary) DropPages() {
	elfbin.DropPages(b.f.Data)
	b.spilled.DropPages()
}

// HasDWARF reports whether the file carries DWARF debug info.
func (b *Binary) HasDWARF() bool { return dwarfsym.Has(b.f.ELF) }

// HasSymtab reports whether the file has a non-empty .symtab.
func (b *Binary) HasSymtab() bool {
	s := b.f.ELF.Section(".symtab")
	return s != nil && s.Type == elf.SHT_SYMTAB && s.Size > s.Entsize
}

// HasGopclntab reports whether the file has Go's pc/line table.
func (b *Binary) HasGopclntab() bool { return elfbin.PclntabSection(b.f.ELF) != nil }

// DWARFErr parses the DWARF sections if not done yet and reports why none
// is usable, nil if it is.
func (b *Binary) DWARFErr() error {
	b.loadDWARF()
	return b.dwarfErr
}

// MemSize estimates the heap held by the Binary itself: headers, notes,
// the open file, and the name index of LookupFunction once built. The
// symbol tables are held in the Tables it was opened with.
func (b *Binary) MemSize() int64 {
	return 4<<10 + int64(len(b.f.ELF.Sections))*int64(unsafe.Sizeof(elf.Section{})) + b.parsedSize.Load()
}

// FunctionStart returns the start (ELF virtual address) and end of the
// function containing vaddr.
func (b *Binary) FunctionStart(vaddr uint64) (start, end uint64, ok bool) {
	defer elfbin.GuardFaults()()
	defer func() {
		if r := recover(); r != nil {
			_ = elfbin.Recovered(r, "finding a function's start")
			start, end, ok = 0, 0, false
		}
	}()
	b.loadSymbols()
	if b.goSyms != nil {
		if start, end, ok := b.goSyms.FunctionRange(vaddr); ok {
			return start, end, true
		}
	}
	if f, ok := b.elfSyms.lookup(vaddr); ok {
		return f.Start, f.Start + max(f.Size, 1), true
	}
	return 0, 0, false
}

// SymbolsErr reports why no symbol table could be loaded, nil if one was.
func (b *Binary) SymbolsErr() error {
	b.loadSymbols()
	return b.symbolsErr
}

// ReadCode returns up to n bytes of the file's content at ELF virtual address
// vaddr, read through the executable PT_LOAD segment that holds it. Fewer
// bytes come back when the segment's file content ends first.
func (b *Binary) ReadCode(vaddr uint64, n int) ([]byte, error) {
	if n < 0 || n > maxReadCode {
		return nil, fmt.Errorf("reading code at %#x: length %d outside [0, %d]", vaddr, n, maxReadCode)
	}
	off, avail, ok := b.f.Addrs.VirtualAddressToFileOffset(vaddr)
	if !ok {
		return nil, fmt.Errorf("reading code at %#x: %w", vaddr, ErrNotMapped)
	}
	n = int(min(uint64(n), avail))
	buf := make([]byte, n)
	read, err := b.f.OS.ReadAt(buf, int64(off))
	if read < n {
		return nil, fmt.Errorf("reading code at %#x: %w", vaddr, err)
	}
	return buf, nil
}

// DebugLink returns the file name and CRC32 of the .gnu_debuglink section.
func (b *Binary) DebugLink() (name string, crc uint32, ok bool) {
	return debugfiles.ReadDebugLink(b.f.ELF)
}

// ErrNotMapped reports a virtual address outside every executable PT_LOAD
// segment's file content.
var ErrNotMapped = errors.New("address not in any executable segment")
