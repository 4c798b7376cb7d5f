package profiler

import (
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// MappingKind says what backs an executable mapping of a process.
type MappingKind uint16

// Kinds of mappings: enum unwind_mapping_kind (unwind_linux.go checks
// them against the generated values).
const (
	// MappingFile: a file's; the walk looks its table up by file.
	MappingFile MappingKind = 0
	// MappingAnon: no file (JIT code); frames are followed by their
	// frame pointers.
	MappingAnon MappingKind = 1
	// MappingVDSO: the vDSO, which has no file; its table, if one is
	// loaded, is the file VDSOFile.
	MappingVDSO MappingKind = 2
)

// VDSOFile is the file key a table of the vDSO is loaded under
// (UNWIND_VDSO_INO of device 0): no file has it.
var VDSOFile = process.FileKey{Dev: 0, Ino: 1}

// Protection bits of a mapping (UnwindMapping.Prot), as the kernel's
// vm_flags hold them.
const (
	ProtRead   = 1
	ProtWrite  = 2
	ProtExec   = 4
	ProtShared = 8
)

// MaxUnwindMappings is how many executable mappings of one process the
// sampler holds.
const MaxUnwindMappings = 64

// MaxUnwindRows bounds the row store: the BPF binary search reaches 2^24
// rows.
const MaxUnwindRows = 1 << 24

// MaxVDSORows is the room for the vDSO's table, kept at the end of the
// row store (the 6.18 x86-64 vDSO compiles to about 40 rows).
const MaxVDSORows = 256

// UnwindRowBytes is the size of one row in the row store.
const UnwindRowBytes = 8

// UnwindMapping is one executable mapping of a process as the sampler
// sees it.
type UnwindMapping struct {
	// Start and End bound the mapping in the process.
	Start, End uint64
	// FileBase is the address the file's offset 0 would be mapped at:
	// Start less the mapping's file offset.
	FileBase uint64
	// File is the mapped file (MappingFile).
	File process.FileKey
	Kind MappingKind
	// Prot holds the Prot* bits.
	Prot uint16
}

// Offset is the file offset the mapping starts at.
func (m *UnwindMapping) Offset() uint64 { return m.Start - m.FileBase }

// Image names the image of a process that mappings were read from: its
// address space and its start. The sampler takes a process's mappings for
// its own only while both are the same.
type Image struct {
	MM, StartNs uint64
	// Reads is how many times the process's samples asked for its
	// mappings to be read again (a leaf outside them): the longer the
	// sampler waits before it asks again (NoticeRead only).
	Reads uint8
}

// FileState is where a file's table stands.
type FileState uint32

// States of a file's table: enum unwind_file_state (checked likewise).
const (
	// FilePending: asked for and being built; frames in the file are
	// followed by their frame pointers meanwhile.
	FilePending FileState = 0
	// FileCFI: the table's rows are in the row store.
	FileCFI FileState = 1
	// FileFramePointers: no table to walk (Go, no CFI, unreadable):
	// frame pointers.
	FileFramePointers FileState = 2
)

// UnwindFile is a file's table as the sampler sees it.
type UnwindFile struct {
	State FileState
	// RowBase is the file offset the rows' PCs are relative to.
	RowBase uint64
	// RowFirst and RowCount locate the rows in the row store; their
	// index follows them.
	RowFirst, RowCount uint32
	Index              UnwindIndex
}

// UnwindIndex is the shape of the index that follows a table's rows in
// the row store (struct unwind_file): entry g, for g in [0, Granules],
// is the last row whose PC (relative to the table's base) is at most
// g<<Shift, or 0; two uint32 entries per row slot. The BPF search for a
// PC reads two entries, then only the rows between them: halving a whole
// table of many thousand rows cost a cache and a TLB miss per step.
type UnwindIndex struct {
	Shift, Granules uint32
}

// UnwindTable is how a table takes room in the row store.
type UnwindTable struct {
	// Slots is the row slots it takes: its rows, then its index.
	Slots uint32
	Index UnwindIndex
}

// rowsPerIndexEntry is about how many rows an index entry spans at
// least: the index takes about an eighth of the rows' room, and a search
// reads a few rows of one or two cache lines after it.
const rowsPerIndexEntry = 4

// minIndexShift is the finest granule, 16 bytes of code.
const minIndexShift = 4

// LayOutUnwindTable is how rows, sorted by PC and relative to base, are
// laid out in the row store.
func LayOutUnwindTable(rows []cfi.Row, base uint64) UnwindTable {
	n := len(rows)
	if n == 0 {
		return UnwindTable{}
	}
	last := uint64(uint32(rows[n-1].PC - base))
	shift := uint32(minIndexShift)
	for ; shift < 32; shift++ {
		if last>>shift+2 <= max(uint64(n)/rowsPerIndexEntry, 2) {
			break
		}
	}
	granules := uint32(last>>shift) + 1
	return UnwindTable{
		Slots: uint32(n) + (granules+2)/2, // granules+1 entries, two a slot
		Index: UnwindIndex{Shift: shift, Granules: granules},
	}
}

// fillIndex writes the index of rows (relative to base) shaped as ix into
// entries, which holds at least ix.Granules+1 of them.
func fillIndex(entries []uint32, rows []cfi.Row, base uint64, ix UnwindIndex) {
	i := 0
	for g := uint64(0); g <= uint64(ix.Granules); g++ {
		limit := g << ix.Shift
		for i+1 < len(rows) && uint64(uint32(rows[i+1].PC-base)) <= limit {
			i++
		}
		entries[g] = uint32(i)
	}
}

// StopReason is why the BPF unwinder stopped walking a stack.
type StopReason int

// Stop reasons: enum unwind_stop of bpfcol_unwind.h, which the generated
// profilerUnwindStop must match (TestStopReasonsAreTheKernelSide).
const (
	// StopComplete: the walk reached the CFI end marker, the process root.
	StopComplete StopReason = iota
	// StopNoTable: the process's tables were not loaded yet.
	StopNoTable
	// StopNoCFI: frame pointers ended in code without CFI.
	StopNoCFI
	// StopBadCFA: the CFA did not move up the stack.
	StopBadCFA
	// StopReadFault: a return address or saved RBP was unreadable.
	StopReadFault
	// StopDepthLimit: the stack was deeper than the sampler records.
	StopDepthLimit
	// StopUnsupported: a rule the unwinder cannot follow.
	StopUnsupported
	// StopOutsideMappings: a zero, non-canonical or unmapped address.
	StopOutsideMappings
	// StopFramePointerEnd: frame pointers ended cleanly (a zero RBP) in
	// code without CFI: the root of Go and JIT stacks.
	StopFramePointerEnd
	// StopUretprobe: a uretprobe's trampoline stood in for a return
	// address the kernel did not give (its return instances have other
	// fields, or none matched the slot).
	StopUretprobe
	// NumStopReasons is the number of reasons.
	NumStopReasons
)

var stopReasonNames = [NumStopReasons]string{
	"complete", "no_table", "no_cfi", "bad_cfa", "read_fault", "depth_limit", "unsupported_rule", "outside_mappings",
	"frame_pointer_end", "uretprobe_unresolved",
}

// String is the reason's metric attribute value.
func (r StopReason) String() string {
	if r < 0 || r >= NumStopReasons {
		return "unknown"
	}
	return stopReasonNames[r]
}

// encodedRow is struct unwind_row: the PC relative to the table base, the
// CFA offset, the rules in one byte and the frame pointer's (or the return
// address's) slot in words.
type encodedRow struct {
	PC     uint32
	CFAOff int16
	Rules  uint8
	FPOff  int8
}

// Return address rules of an encoded row (UNWIND_RA_* of bpfcol_unwind.h),
// in bits 6-7 of its rules.
const (
	raCallSlot uint8 = iota // at CFA-8
	raInLink                // in the link register
	raAboveFP               // in the frame record at FPOff, above the frame pointer
	raAtOff                 // at FPOff, the frame pointer not restored
)

// slotsAtSP (UNWIND_SLOTS_AT_SP) marks a row whose FPOff counts from the
// frame's SP, not from the CFA.
const slotsAtSP uint8 = 8

// encodeRow packs r relative to base. A rule whose offset does not fit is
// encoded as unsupported, so the walk stops there instead of guessing.
func encodeRow(r cfi.Row, base uint64) encodedRow {
	e := encodedRow{PC: uint32(r.PC - base)}
	cfa, fp := r.CFA, r.FP
	if r.CFAOffset < -1<<15 || r.CFAOffset >= 1<<15 {
		cfa = cfi.CFAUnsupported
	} else {
		e.CFAOff = int16(r.CFAOffset)
	}
	// The slots are counted from the CFA, or, where one lies too far
	// below it for a byte of words and the CFA is SP + CFAOffset, from
	// the frame's SP: an arm64 frame record at the bottom of a wide frame.
	slots := slotOffsets(r, 0)
	if !slots.fit && r.CFA == cfi.CFASP {
		if sp := slotOffsets(r, r.CFAOffset); sp.fit {
			slots = sp
			e.Rules |= slotsAtSP
		}
	}
	if fp == cfi.FPAtCFA {
		if slots.fpOK {
			e.FPOff = slots.fp
		} else {
			fp = cfi.FPUnsupported
		}
	}
	var ra uint8
	switch r.RA {
	case cfi.RACallSlot:
		ra = raCallSlot
	case cfi.RAInLink:
		ra = raInLink
	case cfi.RAAtCFA:
		switch {
		case !slots.raOK:
			cfa = cfi.CFAUnsupported
		case fp == cfi.FPAtCFA && r.RAOffset == r.FPOffset+8:
			ra = raAboveFP
		default:
			// One offset fits in the row: the return address's. The
			// frame pointer is then unknown from here on, which a
			// CFI walk only needs where a row computes the CFA by it.
			if fp == cfi.FPAtCFA {
				fp = cfi.FPUnsupported
			}
			ra, e.FPOff = raAtOff, slots.ra
		}
	default:
		cfa = cfi.CFAUnsupported
	}
	if cfa > cfi.CFAUnsupported {
		cfa = cfi.CFAUnsupported
	}
	if fp > cfi.FPUnsupported {
		fp = cfi.FPUnsupported
	}
	e.Rules |= uint8(cfa) | uint8(fp)<<4 | ra<<6
	return e
}

// rowSlots are r's saved frame pointer and return address in words from a
// base, when they fit; fit says whether every slot r reads does.
type rowSlots struct {
	fp, ra     int8
	fpOK, raOK bool
	fit        bool
}

// slotOffsets returns r's slots counted from rel bytes below the CFA.
func slotOffsets(r cfi.Row, rel int32) rowSlots {
	var s rowSlots
	s.fp, s.fpOK = words(r.FPOffset + rel)
	s.ra, s.raOK = words(r.RAOffset + rel)
	s.fit = (r.FP != cfi.FPAtCFA || s.fpOK) && (r.RA != cfi.RAAtCFA || s.raOK)
	return s
}

// words returns off in 8-byte words, if it is a whole number of them that
// fits a row.
func words(off int32) (int8, bool) {
	if off%8 != 0 || off/8 < -128 || off/8 > 127 {
		return 0, false
	}
	return int8(off / 8), true
}
