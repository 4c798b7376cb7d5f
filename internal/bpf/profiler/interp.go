package profiler

// InterpKind is the kind of an interpreter frame, mirrored from enum
// interp_frame_kind in bpfcol_interp.h.
type InterpKind uint8

// Kinds of interpreter frames.
const (
	// InterpCPython is a CPython frame: Object is its code object,
	// Offset the offset in bytes of its instruction in the bytecode.
	InterpCPython InterpKind = 1
	// InterpTruncated marks a stack cut at MaxInterpFrames frames.
	InterpTruncated InterpKind = 2
)

// MaxInterpFrames is how many interpreter frames a sample holds; a deeper
// stack ends in one InterpTruncated frame.
const MaxInterpFrames = 512

// InterpFrame is one interpreter frame of a sample, as the sampler found
// it: what names it, and where it goes among the native frames.
type InterpFrame struct {
	// Object is the address, in the process, of what names the frame
	// (a CPython code object).
	Object uint64
	// Offset is the instruction's offset in the frame's code.
	Offset uint32
	// Anchor places the frame among the native frames. For an
	// interpreted frame (CPython) it is the ordinal, from the leaf, of
	// the interpreter-loop call that runs it: the frames of call k go
	// leafward of the k-th native frame in the interpreter's loop.
	Anchor uint16
	Kind   InterpKind
	// NoOffset is set when the instruction offset could not be read: the
	// frame has no line.
	NoOffset bool
	// AtNative is set when the frame is the native frame User[Anchor]
	// (a JIT's, or an interpreter's found by the native walk), which it
	// replaces; unset, Anchor counts interpreter-loop frames.
	AtNative bool
}

// InterpStop is why the sampler's walk of an interpreter's frames ended,
// mirrored from enum interp_stop.
type InterpStop int

// Reasons an interpreter walk ended.
const (
	// InterpStopEnd: the walk reached the thread's outermost frame.
	InterpStopEnd InterpStop = iota
	// InterpStopNoThreadState: the thread runs no interpreter.
	InterpStopNoThreadState
	// InterpStopTLSFault: the thread's state could not be found.
	InterpStopTLSFault
	// InterpStopReadFault: a frame could not be read.
	InterpStopReadFault
	// InterpStopTruncated: the stack was deeper than MaxInterpFrames.
	InterpStopTruncated
	// InterpStopBadLayout: the process's layout failed a check of the walk.
	InterpStopBadLayout
	// InterpStopNoCodeBlob: a PC in a JIT's code found no live code blob.
	InterpStopNoCodeBlob
	// InterpStopBadFrame: a JIT frame unwound to an impossible caller.
	InterpStopBadFrame
	// NumInterpStops is the number of reasons.
	NumInterpStops
)

var interpStopNames = [NumInterpStops]string{
	"end", "no_thread_state", "thread_state_unreadable", "frame_unreadable", "truncated", "bad_layout",
	"no_code_blob", "bad_jit_frame",
}

// String is the reason's metric attribute value.
func (r InterpStop) String() string {
	if r < 0 || r >= NumInterpStops {
		return "unknown"
	}
	return interpStopNames[r]
}

// PythonTState says how a process's CPython thread states are found,
// mirrored from enum py_tstate_via.
type PythonTState uint8

// Ways to a thread's thread state.
const (
	// PythonTSD: the thread's pthread-specific data under a key the
	// process holds (CPython up to 3.12).
	PythonTSD PythonTState = 1
	// PythonTLSDTV: a thread-local of a shared library, through the
	// thread's dynamic thread vector (3.13+, libpython.so).
	PythonTLSDTV PythonTState = 2
	// PythonTLSTP: a thread-local at a fixed offset from the thread
	// pointer (3.13+, static build or initial-exec TLS).
	PythonTLSTP PythonTState = 3
)

// PythonFrames says how a CPython version links its frames, mirrored from
// enum py_frame_layout.
type PythonFrames uint8

// Frame layouts.
const (
	// PythonFrameObjects: PyFrameObject (3.6-3.10), one loop call each.
	PythonFrameObjects PythonFrames = 1
	// PythonFrameIsEntry: _PyInterpreterFrame with is_entry (3.11).
	PythonFrameIsEntry PythonFrames = 2
	// PythonFrameShim: _PyInterpreterFrame, each loop call starting with
	// a frame on the C stack (3.12+).
	PythonFrameShim PythonFrames = 3
)

// PythonFrameBytesMax bounds PythonProc.FrameBytes: every frame field
// must lie within it.
const PythonFrameBytesMax = 128

// PythonNoOffset marks a field a version lacks (PythonProc.CFrameFrame).
const PythonNoOffset = 0xffff

// PythonProc is what the sampler needs to walk the CPython frames of one
// process: where its thread states are, and its version's layout. Every
// field mirrors struct py_proc in bpfcol_python.h.
type PythonProc struct {
	// TState is how a thread's state is found.
	TState PythonTState
	// TSSKey is the address of the pthread key (PythonTSD).
	TSSKey uint64
	// TSSInitialized is set when the key is a Py_tss_t's, whose
	// _is_initialized, right before it, must be 1.
	TSSInitialized bool
	// TSD is libc's layout of pthread-specific data (PythonTSD).
	TSD TSDLayout
	// DTVOffset and DTVEntry find a library's TLS block (PythonTLSDTV):
	// the DTV pointer is at DTVOffset from the thread pointer, the
	// block's at DTVEntry in the DTV.
	DTVOffset uint16
	DTVEntry  uint64
	// TLSOffset is the thread state's offset in its TLS block
	// (PythonTLSDTV) or from the thread pointer (PythonTLSTP).
	TLSOffset int64

	// TStateFrame is the offset in the thread state of the current
	// frame, or of the _PyCFrame pointer when CFrameFrame is not
	// PythonNoOffset.
	TStateFrame, CFrameFrame uint16
	// Layout, and the offsets in a frame of its fields.
	Layout                                      PythonFrames
	FramePrevious, FrameCode, FrameInstr, Entry uint16
	// FrameBytes is how much of a frame is read.
	FrameBytes uint16
	// CodeInsns is the offset of the first instruction in a code object,
	// for versions whose frames point at their instruction.
	CodeInsns uint16
	// ShimOwner is the owner of a loop call's C-stack frame
	// (PythonFrameShim).
	ShimOwner uint8
	// LastiScale is the bytes per f_lasti unit (PythonFrameObjects).
	LastiScale uint8
}

// TSDLayout is where a libc keeps a thread's pthread-specific data, as its
// pthread_getspecific finds it: keys below 1 << BlockShift in a block at
// First from the thread pointer (from the pointer at Self from it, unless
// Self is PythonNoOffset), the others in blocks of as many keys whose
// pointers are at Second from the thread pointer; each key's entry takes
// Entry bytes, its data pointer at Data.
type TSDLayout struct {
	Self, First, Second uint16
	Entry, Data         uint8
	BlockShift          uint8
}
