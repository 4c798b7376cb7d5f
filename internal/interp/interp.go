// Package interp is what every interpreter bpfcol names frames of
// implements, and the Manager that runs them: told of each process's
// mappings, it attaches the clients that recognise one of their files
// (writing what the BPF walk needs for that process), places interpreter
// frames among native ones, names them off the hot path, and forgets a
// process at its exit.
//
// CPython is the first client (internal/interp/python).
package interp

import (
	"errors"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/process"
)

// Range is a range [Start, End) of addresses.
type Range struct{ Start, End uint64 }

// Contains reports whether addr is in r.
func (r Range) Contains(addr uint64) bool { return addr >= r.Start && addr < r.End }

// Client is one interpreter's support.
type Client interface {
	// Name is the interpreter's name in the receiver's `interpreters`
	// setting ("cpython").
	Name() string
	// Type is the frame type of its frames.
	Type() frame.Type
	// Attach looks at the executable mappings of process pid. It returns
	// the process's Instance, its BPF state written, when the process
	// runs the interpreter; nil and no error when it does not; an error
	// when it does but cannot be followed (wrapping ErrUnsupported when
	// bpfcol does not know its version).
	Attach(pid int, maps []process.Mapping) (Instance, error)
}

// ErrUnsupported is wrapped by Attach's error for an interpreter version
// bpfcol knows no layout of: its processes keep their native frames.
var ErrUnsupported = errors.New("interpreter version not supported")

// ErrNotReady is wrapped by Attach's error for a process whose runtime has
// not set itself up yet (a JVM starting): the Manager attaches it again a
// little later, without counting or logging a failure.
var ErrNotReady = errors.New("runtime not initialized yet")

// Instance is one process attached to a client.
type Instance interface {
	// Current reports whether maps, the process's mappings read again,
	// still show it running what it was attached for: an exec, or an
	// unmapped library, ends that.
	Current(maps []process.Mapping) bool
	// Loops are the runtime address ranges of the interpreter's loop:
	// a native frame there runs interpreted frames (their anchor).
	Loops() []Range
	// Object reads the object at addr of the process, which names the
	// frames in it.
	Object(addr uint64) (*Object, error)
	// Identity reads, for the object at addr now, what Object.Identity
	// held when it was read: the object was freed and another allocated
	// there when they differ.
	Identity(addr uint64) ([]byte, error)
	// Detach removes the process's state from the sampler.
	Detach() error
}

// MappedFile is the file an Instance was attached through, where the
// process mapped it. Embedded, it implements Instance.Current.
type MappedFile struct {
	File  process.FileKey
	Start uint64
}

// MappedFileOf returns where m maps its file.
func MappedFileOf(m *process.Mapping) MappedFile { return MappedFile{File: m.Key(), Start: m.Start} }

// Current reports whether maps still hold the same file at the same place.
func (f MappedFile) Current(maps []process.Mapping) bool {
	for i := range maps {
		if m := &maps[i]; m.File() && m.Start == f.Start && m.Key() == f.File {
			return true
		}
	}
	return false
}

// Object names the frames of one interpreter object, a code object: read
// from the process once, and kept while it stays the same.
type Object struct {
	// Name is the function's name, File its source file.
	Name, File string
	// Lines maps an instruction offset to its source line.
	Lines LineTable
	// Inlines, when set, names an instruction offset with several
	// lines instead (a JIT's code, where other functions were inlined):
	// the innermost function first, the object's own last. Name, File
	// and Lines are then unused.
	Inlines InlineTable
	// Identity is what Instance.Identity reads for this object.
	Identity []byte
	// Bytes is the heap the Object holds, for the cache's bound.
	Bytes int64
}

// LineTable maps an instruction offset in an object to its source line,
// 0 when the offset has none.
type LineTable interface {
	Line(offset uint32) int64
}

// InlineTable names an instruction offset in an object with the lines of
// the functions inlined there, innermost first; never none.
type InlineTable interface {
	Lines(offset uint32) []frame.Line
}

// JIT is implemented by the Instance of a runtime whose frames run as
// machine code (V8): each of its frames stands for the native frame at its
// anchor, and is named by the code that native frame is in.
type JIT interface {
	// Place says how f, one of the runtime's frames, goes with native,
	// the native frame at its anchor (Mapping set).
	Place(native, f *frame.Frame) Placement
	// Locate returns the object that names f (its Native address set)
	// and f's offset in it, from the code at f.Native.
	Locate(f *frame.Frame) (addr uint64, offset uint32, err error)
}

// Placement is how a JIT runtime's frame goes with its native frame.
type Placement uint8

// Placements.
const (
	// PlaceDrop: the native frame is not the runtime's code; it stays,
	// and the runtime's frame is dropped.
	PlaceDrop Placement = iota
	// PlaceReplace: the native frame is the runtime's frame's code; the
	// runtime's frame replaces it.
	PlaceReplace
	// PlaceCaller: the native frame is code the runtime's frame called
	// without a frame of its own (a builtin); both stay, the runtime's
	// frame rootward.
	PlaceCaller
)

// Truncated is the name of the frame that stands for the interpreted
// frames of a stack deeper than the sampler records.
const Truncated = "[truncated]"
