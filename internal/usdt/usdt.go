// Package usdt reads the USDT probes (SystemTap SDT notes) of an ELF file:
// the .note.stapsdt section that <sys/sdt.h> emits, one note per probe site.
package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// noteType is NT_STAPSDT, the type of every SDT note (owner "stapsdt").
const noteType = 3

// maxNotes bounds how much of .note.stapsdt is read.
const maxNotes = 64 << 20

// Probe is one USDT site.
type Probe struct {
	// Provider and Name identify the probe; several sites may share them
	// (a macro expanded in an inlined or duplicated function).
	Provider, Name string
	// PC is the ELF virtual address of the site's nop.
	PC uint64
	// Semaphore is the virtual address of the probe's 2-byte enable
	// counter, zero when it has none.
	Semaphore uint64
	// Args is the argument description, such as "8@%rdi -4@%esi".
	Args string
}

// ErrNoNotes reports a file without SDT notes.
var ErrNoNotes = errors.New("no .note.stapsdt section")

// Read returns every SDT probe of f. Addresses are adjusted for
// prelinking as the SystemTap spec says: each note records the link-time
// address of .stapsdt.base; when the section now sits elsewhere, PC and
// Semaphore move by the same difference.
func Read(f *elf.File) ([]Probe, error) {
	sect := f.Section(".note.stapsdt")
	if sect == nil || sect.Type != elf.SHT_NOTE {
		return nil, ErrNoNotes
	}
	if sect.Size > maxNotes {
		return nil, fmt.Errorf("reading .note.stapsdt: %d bytes, over the %d limit", sect.Size, maxNotes)
	}
	data, err := sect.Data()
	if err != nil {
		return nil, fmt.Errorf("reading .note.stapsdt: %w", err)
	}
	var base uint64
	hasBase := false
	if s := f.Section(".stapsdt.base"); s != nil {
		base, hasBase = s.Addr, true
	}
	order := f.ByteOrder
	addrSize := 8
	if f.Class == elf.ELFCLASS32 {
		addrSize = 4
	}
	var probes []Probe
	for len(data) > 0 {
		if len(data) < 12 {
			return nil, errors.New("reading .note.stapsdt: truncated note header")
		}
		nameSize, descSize, typ := order.Uint32(data), order.Uint32(data[4:]), order.Uint32(data[8:])
		data = data[12:]
		nameEnd, descEnd := align4(uint64(nameSize)), align4(uint64(nameSize))+align4(uint64(descSize))
		if descEnd > uint64(len(data)) {
			return nil, errors.New("reading .note.stapsdt: note larger than the section")
		}
		owner := data[:nameSize]
		desc := data[nameEnd : nameEnd+uint64(descSize)]
		data = data[descEnd:]
		if typ != noteType || string(bytes.TrimRight(owner, "\x00")) != "stapsdt" {
			continue
		}
		p, err := parseDesc(desc, addrSize, order)
		if err != nil {
			return nil, err
		}
		if hasBase && p.base != 0 && p.base != base {
			shift := base - p.base // wraps correctly both ways
			p.PC += shift
			if p.Semaphore != 0 {
				p.Semaphore += shift
			}
		}
		probes = append(probes, p.Probe)
	}
	return probes, nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

type parsedProbe struct {
	Probe
	base uint64
}

// parseDesc decodes a note's descriptor: pc, base, semaphore (addresses),
// then provider, name and args as NUL-terminated strings.
func parseDesc(desc []byte, addrSize int, order binary.ByteOrder) (parsedProbe, error) {
	var p parsedProbe
	if len(desc) < 3*addrSize {
		return p, errors.New("reading .note.stapsdt: descriptor too short")
	}
	addr := func(i int) uint64 {
		if addrSize == 4 {
			return uint64(order.Uint32(desc[i*4:]))
		}
		return order.Uint64(desc[i*8:])
	}
	p.PC, p.base, p.Semaphore = addr(0), addr(1), addr(2)
	strs := bytes.SplitN(desc[3*addrSize:], []byte{0}, 4)
	if len(strs) < 3 || len(strs[0]) == 0 || len(strs[1]) == 0 {
		return p, errors.New("reading .note.stapsdt: descriptor without provider and name")
	}
	p.Provider, p.Name, p.Args = string(strs[0]), string(strs[1]), string(strs[2])
	return p, nil
}
