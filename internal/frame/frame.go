// Package frame is the one frame type of a profile, from the aggregator
// that reads stacks out of BPF samples to the builder that writes pdata:
// the kind of code, the address, the mapping it belongs to and, once
// named, its source lines.
//
// A return address is turned into a lookup address once, by
// AtReturnAddress: every later stage looks the address up as it is.
package frame

import (
	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/process"
)

// Type is the kind of code a frame runs.
type Type uint8

// Frame types. The zero value is Native.
const (
	// Native is machine code of a user-space binary.
	Native Type = iota
	// Go is machine code the Go toolchain compiled.
	Go
	// Kernel is kernel code, of the core kernel or of a module.
	Kernel
	// BPF is a JIT-compiled BPF program running in the kernel.
	BPF
	// CPython is a Python function run by the CPython interpreter: an
	// interpreted frame, with no machine code of its own.
	CPython
	// JVM is a Java method run by a JVM (HotSpot), interpreted or
	// compiled: named from the JVM's own structures, with no mapping.
	JVM
	// V8JS is a JavaScript function run by V8, interpreted or compiled:
	// named from V8's objects rather than from a binary.
	V8JS
)

// String returns the profile.frame.type value of t.
func (t Type) String() string {
	switch t {
	case Go:
		return conventions.FrameTypeGo
	case Kernel:
		return conventions.FrameTypeKernel
	case BPF:
		return conventions.FrameTypeBPF
	case CPython:
		return conventions.FrameTypeCPython
	case JVM:
		return conventions.FrameTypeJVM
	case V8JS:
		return conventions.FrameTypeV8JS
	default:
		return conventions.FrameTypeNative
	}
}

// InKernel reports whether frames of type t run in the kernel.
func (t Type) InKernel() bool { return t == Kernel || t == BPF }

// Interpreted reports whether frames of type t are an interpreter's: no
// machine code, so no mapping; their Address is the interpreter's object
// that names them, in the process, and Offset the instruction in it. A JIT
// runtime's frame (V8JS) also has the machine code it runs at (Native)
// until its object is located.
func (t Type) Interpreted() bool { return t == CPython || t == JVM || t == V8JS }

// Mapping is the memory mapping a frame's address falls in, with the build
// ids of its file once known.
type Mapping struct {
	// Mapping is the line of /proc/PID/maps for user frames: bounds, file
	// offset and the file's identity, which is how the file is opened.
	// Kernel mappings only set Path.
	process.Mapping
	BuildIDGNU, BuildIDGo string
}

// KernelMapping returns the mapping of kernel frames of module; "" is the
// core kernel (and JIT-compiled BPF programs).
func KernelMapping(module string) *Mapping {
	if module == "" {
		return &Mapping{Mapping: process.Mapping{Path: conventions.KernelMappingPath}}
	}
	return &Mapping{Mapping: process.Mapping{Path: conventions.KernelModuleMappingPath(module)}}
}

// Line is one source-level function at a frame: an inlined call or the
// function the code belongs to.
type Line struct {
	// Name is the function's name as people read it: demangled.
	Name string
	// SystemName is the name as the binary spells it (mangled); empty when
	// it is the same as Name.
	SystemName string
	// File is the source file, empty when unknown.
	File string
	// Line and Column are 0 when unknown.
	Line, Column int64
}

// Frame is one frame of a stack.
type Frame struct {
	Type Type
	// Address is the address to look up. For a return address it is
	// already one byte lower, inside the call instruction (see
	// AtReturnAddress). It is an address of the sampled process (or of the
	// kernel), at every stage.
	Address uint64
	// VirtualAddress is Address as an ELF virtual address of Mapping's
	// file, which the resolve stage sets for a frame in a file it could
	// read; 0 for any other frame (kernel, JIT code, anonymous memory, an
	// address outside the file's segments).
	VirtualAddress uint64
	// ReturnAddress is set when the stack held a return address rather
	// than the interrupted instruction.
	ReturnAddress bool
	// Offset is an interpreted frame's instruction: its offset in the
	// code Address names. Resolved, the frame has Address and Offset 0.
	Offset uint32
	// Truncated marks the frame that stands for the interpreted frames
	// of a stack cut at the sampler's limit.
	Truncated bool
	// Native is, for a frame of a JIT runtime, the address of the native
	// frame it stands for (as that frame's Address: a return address is
	// one byte lower): which compiled code runs it, and where in it.
	// Zero once the frame's object is located from it.
	Native uint64
	// Mapping is nil when the address is in no known mapping.
	Mapping *Mapping
	// Lines holds the inlined functions first and the function they were
	// inlined into last. Empty when the frame has no name.
	Lines []Line
}

// LocationAddress is the address a profile's location holds for the
// frame: the ELF virtual address in its file when it has one, else its
// address in the process (or the kernel).
func (f *Frame) LocationAddress() uint64 {
	if f.VirtualAddress != 0 {
		return f.VirtualAddress
	}
	return f.Address
}

// AtPC returns the frame of the interrupted instruction at pc.
func AtPC(t Type, pc uint64) Frame { return Frame{Type: t, Address: pc} }

// AtReturnAddress returns the frame of the return address ret. Its Address
// is ret-1: the instruction after a call may be the first of another
// function or source line, the call's last byte never is. This is the one
// place the adjustment is made.
func AtReturnAddress(t Type, ret uint64) Frame {
	f := Frame{Type: t, Address: ret, ReturnAddress: true}
	if ret > 0 {
		f.Address--
	}
	return f
}

// NoOffset is the Offset of an interpreted frame whose instruction is
// unknown: it is named without a line.
const NoOffset = ^uint32(0)

// Interpreted returns the frame of an interpreter's frame: its object
// (code object, method) at address obj in the process, its instruction at
// offset.
func Interpreted(t Type, obj uint64, offset uint32) Frame {
	return Frame{Type: t, Address: obj, Offset: offset}
}

// Name returns the name of the function the frame's code belongs to (the
// last line), or "" when the frame is unnamed.
func (f *Frame) Name() string {
	if len(f.Lines) == 0 {
		return ""
	}
	return f.Lines[len(f.Lines)-1].Name
}
