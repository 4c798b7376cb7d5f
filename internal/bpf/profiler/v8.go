package profiler

import "fmt"

// InterpV8 is a V8 JavaScript frame: Object is its SharedFunctionInfo
// (a tagged pointer), Offset its bytecode offset when the frame is
// interpreted (else NoOffset is set); AtNative is set, Anchor being the
// index in User of the native frame it is. Mirrored from enum
// interp_frame_kind.
const InterpV8 InterpKind = 4

// JITFrameResult is what a frame of a JIT runtime's process that the walk
// stepped through by frame pointer turned out to be, mirrored from enum
// jit_frame_result.
type JITFrameResult int

// What such a frame was.
const (
	// JITFrameRecorded: a frame of the runtime's language, recorded.
	JITFrameRecorded JITFrameResult = iota
	// JITFrameTyped: one of the runtime's own frames (entry, exit, stub).
	JITFrameTyped
	// JITFrameNotJIT: native code without CFI, or slots that hold no
	// frame.
	JITFrameNotJIT
	// JITFrameReadFault: its slots, or what they point at, unreadable.
	JITFrameReadFault
	// NumJITFrameResults is the number of results.
	NumJITFrameResults
)

var jitFrameResultNames = [NumJITFrameResults]string{"recorded", "runtime_frame", "not_jit", "read_fault"}

// String is the result's metric attribute value.
func (r JITFrameResult) String() string {
	if r < 0 || r >= NumJITFrameResults {
		return "unknown"
	}
	return jitFrameResultNames[r]
}

// V8FrameSlotsBytes is how far below a frame pointer the walk reads: every
// frame slot of a V8Proc is within it.
const V8FrameSlotsBytes = 64

// V8Proc is where one process's V8 keeps what the walk reads. Every field
// mirrors struct v8_proc in bpfcol_v8.h.
type V8Proc struct {
	// Bytes below the frame pointer of a frame's context (or a typed
	// frame's marker), its JSFunction, and an interpreted frame's
	// BytecodeArray and bytecode offset.
	FPContext, FPFunction, FPBytecodeArray, FPBytecodeOffset uint8
	// FunctionShared is the offset of a JSFunction's SharedFunctionInfo,
	// SharedFunctionData that of a SharedFunctionInfo's function data.
	FunctionShared, SharedFunctionData uint8
}

// Check refuses a layout whose slots the walk would not read.
func (p *V8Proc) Check() error {
	for _, s := range []struct {
		name string
		off  uint8
	}{
		{"context", p.FPContext}, {"function", p.FPFunction},
		{"bytecode array", p.FPBytecodeArray}, {"bytecode offset", p.FPBytecodeOffset},
	} {
		if s.off == 0 || s.off%8 != 0 || s.off > V8FrameSlotsBytes {
			return fmt.Errorf("frame slot %s %d bytes below the frame pointer: not a multiple of 8 in (0, %d]", s.name, s.off, V8FrameSlotsBytes)
		}
	}
	if p.FunctionShared%8 != 0 || p.SharedFunctionData%8 != 0 {
		return fmt.Errorf("field offsets %d and %d: not multiples of 8", p.FunctionShared, p.SharedFunctionData)
	}
	return nil
}
