package cfi

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/stretchr/testify/require"
)

// section builds CFI sections for seeds and edge cases.
type section struct {
	kind sectionKind
	b    []byte
}

func (s *section) u32(v uint32) { s.b = binary.LittleEndian.AppendUint32(s.b, v) }
func (s *section) u64(v uint64) { s.b = binary.LittleEndian.AppendUint64(s.b, v) }

// entry appends one entry (length, id, body) and returns its offset.
func (s *section) entry(id uint32, body []byte) int {
	off := len(s.b)
	s.u32(uint32(4 + len(body)))
	s.u32(id)
	s.b = append(s.b, body...)
	return off
}

// cie appends a CIE: version 1, code alignment 1, data alignment -8,
// return address column 16.
func (s *section) cie(aug string, augData, insns []byte) int {
	body := append([]byte{1}, aug...)
	body = append(body, 0, 1, 0x78, 16)
	if aug != "" && aug[0] == 'z' {
		body = append(body, byte(len(augData)))
		body = append(body, augData...)
	}
	id := uint32(0)
	if s.kind == debugFrame {
		id = 0xffffffff
	}
	return s.entry(id, append(body, insns...))
}

// fde appends an FDE with pcrel sdata4 addresses (.eh_frame, 'zR' with
// 0x1b) or absolute 8-byte ones (.debug_frame), at section address base.
func (s *section) fde(cie int, base, begin, size uint64, z bool, insns []byte) {
	off := len(s.b)
	var body []byte
	if s.kind == ehFrame {
		field := base + uint64(off) + 8
		body = binary.LittleEndian.AppendUint32(body, uint32(begin-field))
		body = binary.LittleEndian.AppendUint32(body, uint32(size))
	} else {
		body = binary.LittleEndian.AppendUint64(body, begin)
		body = binary.LittleEndian.AppendUint64(body, size)
	}
	if z {
		body = append(body, 0)
	}
	id := uint32(cie)
	if s.kind == ehFrame {
		id = uint32(off + 4 - cie)
	}
	s.entry(id, append(body, insns...))
}

const seedBase = 0x1000

// x86-64 DWARF register numbers of the seeds.
const (
	regRBP = 6
	regRSP = 7
	regRIP = 16
)

var cieInit = []byte{opDefCFA, regRSP, 8, opOffset | regRIP, 1}

// seeds returns CFI sections that use every op the compiler knows.
func seeds() []section {
	eh := section{kind: ehFrame}
	c := eh.cie("zR", []byte{pePCRel | peSdata4}, cieInit)
	eh.fde(c, seedBase, 0x2000, 0x40, true, []byte{
		opAdvanceLoc | 1, opDefCFAOffset, 16, opOffset | regRBP, 2,
		opAdvanceLoc | 3, opDefCFARegister, regRBP,
		opRememberState, opAdvanceLoc1, 4, opDefCFA, regRSP, 8, opRestore | regRBP,
		opAdvanceLoc2, 1, 0, opRestoreState, opGNUArgsSize, 16,
		opAdvanceLoc4, 2, 0, 0, 0, opDefCFAOffsetSF, 0x7e, opOffsetExtendedSF, regRBP, 0x7f,
		opAdvanceLoc | 1, opValExpression, regRBP, 2, 0x77, 0,
		opAdvanceLoc | 1, opDefCFAExpression, 11, 0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22,
		opAdvanceLoc | 1, opDefCFAExpression, 3, 0x77, 8, 0x06,
		opAdvanceLoc | 1, opUndefined, regRIP, opRestoreExtended, regRIP,
		opAdvanceLoc | 1, opRegister, regRBP, 3, opSameValue, regRBP, opValOffset, regRBP, 2,
		opDefCFASF, regRSP, 0x7f, opGNUNegativeOffsetExtend, regRBP, 2, opNop,
	})
	eh.fde(c, seedBase, 0x2040, 0x10, true, nil)
	s := eh.cie("zRS", []byte{pePCRel | peSdata4}, nil)
	eh.fde(s, seedBase, 0x2060, 0x8, true, []byte{opDefCFAExpression, 4, 0x77, 0xa0, 0x01, 0x06})
	p := eh.cie("zPLR", []byte{0x9b, 0, 0, 0, 0, 0x1b, 0x1b}, cieInit)
	eh.fde(p, seedBase, 0x2070, 0x8, true, []byte{opAdvanceLoc | 4, opUndefined, regRIP})
	eh.u32(0)

	dbg := section{kind: debugFrame}
	dc := dbg.cie("", nil, cieInit)
	dbg.fde(dc, 0, 0x3000, 0x20, false, []byte{opAdvanceLoc | 1, opDefCFAOffset, 16, opSetLoc, 0x10, 0x30, 0, 0, 0, 0, 0, 0, opDefCFAOffset, 24})
	ds := dbg.cie("S", nil, nil)
	dbg.fde(ds, 0, 0x3020, 0x8, false, nil)
	return []section{eh, dbg}
}

// compileRaw compiles one section's bytes as the fuzz target does.
func compileRaw(data []byte, kind sectionKind) []Row {
	var st parseStats
	b := &bases{section: seedBase, data: seedBase, hasData: true}
	fdes, _ := parseSection(data, kind, b, &st)
	return compile(archX86_64, data, fdes, b, nil, &st)
}

func TestSeeds(t *testing.T) {
	// Spot checks of rules the hand-made sections must produce.
	for _, s := range seeds() {
		tbl := &Table{Rows: compileRaw(s.b, s.kind)}
		checkSorted(t, tbl)
		require.NotEmpty(t, tbl.Rows)
		if s.kind == ehFrame {
			r, _ := tbl.Lookup(0x2001)
			require.Equal(t, Row{PC: 0x2001, CFA: CFASP, CFAOffset: 16, FP: FPAtCFA, FPOffset: -16}, r)
			r, _ = tbl.Lookup(0x2004)
			require.Equal(t, CFAFP, r.CFA)
			r, _ = tbl.Lookup(0x2008)
			require.Equal(t, Row{PC: 0x2008, CFA: CFASP, CFAOffset: 8}, r, "restore rbp inside remembered state")
			r, _ = tbl.Lookup(0x2009)
			require.Equal(t, CFAFP, r.CFA, "restore_state restores the CFA")
			r, _ = tbl.Lookup(0x2048)
			require.Equal(t, Row{PC: 0x2040, CFA: CFASP, CFAOffset: 8}, r, "an FDE with no instructions has the CIE's rule")
			r, _ = tbl.Lookup(0x2058)
			require.Equal(t, CFANone, r.CFA, "a gap between FDEs")
			r, _ = tbl.Lookup(0x2060)
			require.Equal(t, CFASignal, r.CFA)
			r, _ = tbl.Lookup(0x2074)
			require.Equal(t, CFAEnd, r.CFA)
		} else {
			r, _ := tbl.Lookup(0x3010)
			require.Equal(t, Row{PC: 0x3010, CFA: CFASP, CFAOffset: 24}, r, "DW_CFA_set_loc")
			r, _ = tbl.Lookup(0x3020)
			require.Equal(t, CFASignal, r.CFA, `"S" CIE in .debug_frame`)
		}
	}
}

// TestTruncated compiles every prefix of the seeds: no prefix may fail
// the table invariants or panic.
func TestTruncated(t *testing.T) {
	for _, s := range seeds() {
		for n := range s.b {
			checkSorted(t, &Table{Rows: compileRaw(s.b[:n], s.kind)})
		}
	}
}

// minimalELF returns an x86-64 ELF file with no section headers: one
// executable PT_LOAD, a PT_NOTE with a build ID, and .eh_frame found
// through PT_GNU_EH_FRAME, holding the FDEs of seeds().
func minimalELF() []byte {
	const phoff, phnum, content = 64, 3, 256
	note := binary.LittleEndian.AppendUint32(nil, 4)
	note = binary.LittleEndian.AppendUint32(note, 20)
	note = binary.LittleEndian.AppendUint32(note, 3)
	note = append(note, "GNU\x00"...)
	for i := range 20 {
		note = append(note, byte(i+1))
	}
	hdrAddr := uint64(content + len(note))
	ehAddr := hdrAddr + 8
	hdr := []byte{1, pePCRel | peSdata4, peOmit, peOmit}
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(ehAddr-(hdrAddr+4)))
	eh := section{kind: ehFrame}
	c := eh.cie("zR", []byte{pePCRel | peSdata4}, cieInit)
	eh.fde(c, ehAddr, 0x2000, 0x40, true, []byte{opAdvanceLoc | 1, opDefCFAOffset, 16, opOffset | regRBP, 2})
	eh.u32(0)

	var b []byte
	b = append(b, 0x7f, 'E', 'L', 'F', 2, 1, 1)
	b = append(b, make([]byte, 16-len(b))...)
	b = binary.LittleEndian.AppendUint16(b, uint16(elf.ET_DYN))
	b = binary.LittleEndian.AppendUint16(b, uint16(elf.EM_X86_64))
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint64(b, 0)     // entry
	b = binary.LittleEndian.AppendUint64(b, phoff) // phoff
	b = binary.LittleEndian.AppendUint64(b, 0)     // shoff
	b = binary.LittleEndian.AppendUint32(b, 0)     // flags
	for _, v := range []uint16{64, 56, phnum, 64, 0, 0} {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	size := uint64(ehAddr) + uint64(len(eh.b))
	prog := func(typ elf.ProgType, flags elf.ProgFlag, off, filesz, memsz uint64) {
		b = binary.LittleEndian.AppendUint32(b, uint32(typ))
		b = binary.LittleEndian.AppendUint32(b, uint32(flags))
		for _, v := range []uint64{off, off, off, filesz, memsz, 8} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	}
	prog(elf.PT_LOAD, elf.PF_R|elf.PF_X, 0, size, 0x4000)
	prog(elf.PT_NOTE, elf.PF_R, content, uint64(len(note)), uint64(len(note)))
	prog(elf.PT_GNU_EH_FRAME, elf.PF_R, hdrAddr, uint64(len(hdr)), uint64(len(hdr)))
	b = append(b, make([]byte, content-len(b))...)
	b = append(b, note...)
	b = append(b, hdr...)
	return append(b, eh.b...)
}

func TestMinimalELF(t *testing.T) {
	f, err := elf.NewFile(bytes.NewReader(minimalELF()))
	require.NoError(t, err)
	require.Equal(t, "0102030405060708090a0b0c0d0e0f1011121314", elfbin.GNUBuildID(f))
	tbl, err := FromELF(f)
	require.NoError(t, err)
	require.Equal(t, []Row{
		{PC: 0x2000, CFA: CFASP, CFAOffset: 8},
		{PC: 0x2001, CFA: CFASP, CFAOffset: 16, FP: FPAtCFA, FPOffset: -16},
		{PC: 0x2040},
	}, tbl.Rows)
}

// Fuzz modes: the input is a raw .eh_frame, a raw .debug_frame or an ELF
// file.
const (
	fuzzEHFrame uint8 = iota
	fuzzDebugFrame
	fuzzELF
)

func FuzzCFI(f *testing.F) {
	for _, s := range seeds() {
		mode := fuzzEHFrame
		if s.kind == debugFrame {
			mode = fuzzDebugFrame
		}
		f.Add(s.b, mode)
	}
	f.Add(minimalELF(), fuzzELF)
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		if mode%3 == fuzzELF {
			ef, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				return
			}
			elfbin.GNUBuildID(ef)
			if tbl, err := FromELF(ef); err == nil {
				checkSorted(t, tbl)
				NeedsDebugFrame(ef, tbl)
			}
			if tbl, err := DebugFrame(ef); err == nil {
				checkSorted(t, tbl)
			}
			return
		}
		kind := ehFrame
		if mode%3 == fuzzDebugFrame {
			kind = debugFrame
		}
		b := &bases{section: seedBase, data: seedBase, hasData: true}
		var st parseStats
		fdes, _ := parseSection(data, kind, b, &st)
		require.LessOrEqual(t, len(fdes), countEntries(data, kind), "FDEs past the pre-sized slice")
		rows := checkCompile(t, data, fdes, b, nil) // the same as compileRaw's
		tbl := &Table{Rows: rows}
		checkSorted(t, tbl)
		// Every row costs at least a byte of input, every FDE (at least
		// 12 bytes) at most two more: the table is bounded by the input.
		require.LessOrEqual(t, len(rows), 2*len(data)+1)
		if filled := tbl.Fill(&Table{}).Rows; len(rows) > 0 || len(filled) > 0 {
			require.Equal(t, rows, filled)
		}
		for _, s := range seeds() {
			other := &Table{Rows: compileRaw(s.b, s.kind)}
			checkFill(t, tbl, other)
			checkFill(t, other, tbl)
		}
	})
}
