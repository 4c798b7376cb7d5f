package profiler

import "github.com/bpfcol/bpfcol/internal/unwind/cfi"

// MappingKind says how the sampler unwinds through an executable mapping.
type MappingKind uint32

// Kinds of mappings, mirrored from bpfcol_unwind.h.
const (
	// MappingCFI: the mapping's file has rows in the row store.
	MappingCFI MappingKind = 0
	// MappingFramePointer: no CFI (JIT code, Go, a file without unwind
	// tables); frames are followed by their frame pointers.
	MappingFramePointer MappingKind = 1
	// MappingPending: the file's table is not loaded yet; frame pointers
	// meanwhile, and a stop there counts as no_table.
	MappingPending MappingKind = 2
)

// MaxUnwindMappings is how many executable mappings of one process the
// sampler holds.
const MaxUnwindMappings = 512

// MaxUnwindRows bounds the row store: the BPF binary search reaches 2^24
// rows.
const MaxUnwindRows = 1 << 24

// MaxVDSORows is the room for the vDSO's table, kept at the end of the
// row store (the 6.18 x86-64 vDSO compiles to about 40 rows).
const MaxVDSORows = 256

// UnwindRowBytes is the size of one row in the row store.
const UnwindRowBytes = 8

// UnwindMapping is one executable mapping of a process as the sampler sees
// it.
type UnwindMapping struct {
	// Start and End bound the mapping in the process.
	Start, End uint64
	// TableBase is the runtime address the rows' PCs are relative to: the
	// table's base ELF address plus the mapping's load bias.
	TableBase uint64
	// RowFirst and RowCount locate the file's rows in the row store.
	RowFirst, RowCount uint32
	Kind               MappingKind
}

// StopReason is why the BPF unwinder stopped walking a stack.
type StopReason int

// Stop reasons, mirrored from enum unwind_stop in bpfcol_unwind.h.
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
// CFA offset, both rules in one byte and the RBP offset in words.
type encodedRow struct {
	PC     uint32
	CFAOff int16
	Rules  uint8
	RBPOff int8
}

// encodeRow packs r relative to base. A rule whose offset does not fit is
// encoded as unsupported, so the walk stops there instead of guessing.
func encodeRow(r cfi.Row, base uint64) encodedRow {
	e := encodedRow{PC: uint32(r.PC - base)}
	cfa, rbp := r.CFA, r.RBP
	if r.CFAOffset < -1<<15 || r.CFAOffset >= 1<<15 {
		cfa = cfi.CFAUnsupported
	} else {
		e.CFAOff = int16(r.CFAOffset)
	}
	if rbp == cfi.RBPAtCFA {
		if r.RBPOffset%8 != 0 || r.RBPOffset/8 < -128 || r.RBPOffset/8 > 127 {
			rbp = cfi.RBPUnsupported
		} else {
			e.RBPOff = int8(r.RBPOffset / 8)
		}
	}
	if cfa > cfi.CFAUnsupported {
		cfa = cfi.CFAUnsupported
	}
	if rbp > cfi.RBPUnsupported {
		rbp = cfi.RBPUnsupported
	}
	e.Rules = uint8(cfa) | uint8(rbp)<<4
	return e
}
