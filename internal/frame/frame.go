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
	default:
		return conventions.FrameTypeNative
	}
}

// InKernel reports whether frames of type t run in the kernel.
func (t Type) InKernel() bool { return t == Kernel || t == BPF }

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
	// kernel) until the resolve stage, which turns a user frame's address
	// into the ELF virtual address in Mapping's file.
	Address uint64
	// ReturnAddress is set when the stack held a return address rather
	// than the interrupted instruction.
	ReturnAddress bool
	// Mapping is nil when the address is in no known mapping.
	Mapping *Mapping
	// Lines holds the inlined functions first and the function they were
	// inlined into last. Empty when the frame has no name.
	Lines []Line
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

// Name returns the name of the function the frame's code belongs to (the
// last line), or "" when the frame is unnamed.
func (f *Frame) Name() string {
	if len(f.Lines) == 0 {
		return ""
	}
	return f.Lines[len(f.Lines)-1].Name
}
