package python

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
)

// Version is a CPython major.minor version.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

func (v Version) atLeast(minor int) bool { return v.Major > 3 || v.Major == 3 && v.Minor >= minor }

// Versions whose layout bpfcol knows: a process of another one keeps its
// native frames, and is counted as unsupported.
var (
	MinVersion = Version{3, 6}
	MaxVersion = Version{3, 13}
)

// ErrUnsupportedVersion is returned for a CPython whose layout bpfcol does
// not know.
var ErrUnsupportedVersion = errors.New("CPython version without a known layout")

// Supported reports whether bpfcol knows v's layout.
func (v Version) Supported() bool {
	return v.Major == 3 && v.Minor >= MinVersion.Minor && v.Minor <= MaxVersion.Minor
}

// lineTable is how a code object maps instructions to lines.
type lineTable uint8

const (
	// lnotab: co_lnotab, (byte offset, line) increments (3.6-3.9).
	lnotab lineTable = iota + 1
	// linetable310: co_linetable, (bytes, line) ranges (3.10).
	linetable310
	// locations: co_linetable, the location table (3.11+).
	locations
)

// layout is where a CPython version keeps what bpfcol reads: the BPF
// walk's offsets, and the code object, string and bytes fields naming
// reads.
type layout struct {
	version Version
	// walk is the sampler's part: the offsets it reads frames with.
	walk profiler.PythonProc
	// Code objects: the bytes read of one, its fields' offsets.
	codeSize                             uint64
	coName, coQualname, coFilename       uint64
	coFirstLine, coLineTable, coBytecode uint64
	// coUnits is the offset of the code's length in code units (3.11+,
	// a PyVarObject's ob_size); coBytecode the offset of its bytecode
	// bytes object before.
	coUnits   uint64
	hasQual   bool
	lines     lineTable
	codeInsns uint64
	// Strings: where an ASCII and a compact non-ASCII string's
	// characters start.
	asciiData, compactData uint64
	// Bytes objects: their length's and characters' offsets.
	bytesSize, bytesData uint64
}

// Fields of objects every CPython 3 lays out the same, from its C API
// (Include/object.h, Include/cpython/unicodeobject.h): no binary before
// 3.13 describes them.
const (
	obType      = 8  // PyObject.ob_type
	varSize     = 16 // PyVarObject.ob_size
	strLength   = 16 // PyASCIIObject.length
	strState    = 32 // PyASCIIObject.state: interned:2, kind:3, compact:1, ascii:1
	unicodeTail = 8  // PyUnicodeObject's data pointer after PyCompactUnicodeObject
)

// shimOwner is FRAME_OWNED_BY_CSTACK of enum _frameowner
// (Include/internal/pycore_frame.h, 3.12 and 3.13): the owner of the
// frame each eval loop call starts with on the C stack.
const shimOwner = 3

// walkTables are what only the C headers of each version say, and no
// type object: where the thread state keeps the current frame, and the
// _PyInterpreterFrame fields of 3.11 and 3.12 (3.13 publishes them in
// _Py_DebugOffsets; before 3.11 PyFrame_Type's members give them). Each
// is checked against the DWARF of pyenv's builds by TestTablesMatchDWARF.
var walkTables = map[int]profiler.PythonProc{
	// PyThreadState.frame (Include/cpython/pystate.h), PyFrameObject.
	6: {TStateFrame: 24, CFrameFrame: profiler.PythonNoOffset, Layout: profiler.PythonFrameObjects, LastiScale: 1},
	7: {TStateFrame: 24, CFrameFrame: profiler.PythonNoOffset, Layout: profiler.PythonFrameObjects, LastiScale: 1},
	8: {TStateFrame: 24, CFrameFrame: profiler.PythonNoOffset, Layout: profiler.PythonFrameObjects, LastiScale: 1},
	9: {TStateFrame: 24, CFrameFrame: profiler.PythonNoOffset, Layout: profiler.PythonFrameObjects, LastiScale: 1},
	// 3.10: f_lasti counts code units, and became a getter: no member
	// gives its offset (Include/cpython/frameobject.h).
	10: {TStateFrame: 24, CFrameFrame: profiler.PythonNoOffset, Layout: profiler.PythonFrameObjects, LastiScale: 2, FrameInstr: 96},
	// PyThreadState.cframe->current_frame; _PyInterpreterFrame's f_code,
	// previous, prev_instr, is_entry (Include/internal/pycore_frame.h).
	11: {TStateFrame: 56, CFrameFrame: 8, Layout: profiler.PythonFrameIsEntry,
		FrameCode: 32, FramePrevious: 48, FrameInstr: 56, Entry: 68},
	// The same, reordered; owner marks the eval loop's own frame.
	12: {TStateFrame: 56, CFrameFrame: 0, Layout: profiler.PythonFrameShim,
		FrameCode: 0, FramePrevious: 8, FrameInstr: 56, Entry: 70, ShimOwner: shimOwner},
}

// findLayout reads v's layout from img: its type objects' members, its
// _Py_DebugOffsets (3.13), and walkTables for the rest.
func findLayout(img *elfimage.Image, v Version) (*layout, error) {
	if !v.Supported() {
		return nil, fmt.Errorf("CPython %s: %w", v, ErrUnsupportedVersion)
	}
	code, err := readType(img, "PyCode_Type")
	if err != nil {
		return nil, err
	}
	bytesType, err := readType(img, "PyBytes_Type")
	if err != nil {
		return nil, err
	}
	strType, err := readType(img, "PyUnicode_Type")
	if err != nil {
		return nil, err
	}
	if code.name != "code" || bytesType.name != "bytes" || strType.name != "str" {
		return nil, fmt.Errorf("type objects named %q, %q, %q: not code, bytes and str", code.name, bytesType.name, strType.name)
	}
	l := &layout{version: v, codeSize: code.basicSize, bytesSize: varSize}
	// PyBytesObject_SIZE is offsetof(ob_sval) + 1.
	l.bytesData = bytesType.basicSize - 1
	// The fixed part of a string, before 3.12 with its wstr fields.
	l.asciiData, l.compactData = 48, 72
	if v.atLeast(12) {
		l.asciiData, l.compactData = 40, 56
	}
	if strType.basicSize != l.compactData+unicodeTail {
		return nil, fmt.Errorf("str objects of %d bytes: not the %d-byte layout of CPython %s", strType.basicSize, l.compactData+unicodeTail, v)
	}
	member := func(t *typeInfo, name string) (uint64, error) {
		off, ok := t.members[name]
		if !ok {
			return 0, fmt.Errorf("%s has no member %s", t.name, name)
		}
		return off, nil
	}
	var errs []error
	get := func(t *typeInfo, name string) uint64 {
		off, err := member(t, name)
		errs = append(errs, err)
		return off
	}
	l.coName = get(code, "co_name")
	l.coFilename = get(code, "co_filename")
	l.coFirstLine = get(code, "co_firstlineno")
	switch {
	case v.atLeast(11):
		l.coLineTable, l.lines = get(code, "co_linetable"), locations
		l.coQualname, l.hasQual = get(code, "co_qualname"), true
		l.coUnits = varSize
		// tp_basicsize is offsetof(PyCodeObject, co_code_adaptive).
		l.codeInsns = code.basicSize
	case v.Minor == 10:
		l.coLineTable, l.lines = get(code, "co_linetable"), linetable310
		l.coBytecode = get(code, "co_code")
	default:
		l.coLineTable, l.lines = get(code, "co_lnotab"), lnotab
		l.coBytecode = get(code, "co_code")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reading CPython %s's code objects: %w", v, err)
	}

	if v.atLeast(13) {
		if err := l.fromDebugOffsets(img); err != nil {
			return nil, err
		}
	} else {
		l.walk = walkTables[v.Minor]
		if l.walk.Layout == profiler.PythonFrameObjects {
			frameType, err := readType(img, "PyFrame_Type")
			if err != nil {
				return nil, err
			}
			l.walk.FramePrevious = uint16(get(frameType, "f_back"))
			l.walk.FrameCode = uint16(get(frameType, "f_code"))
			if l.walk.FrameInstr == 0 {
				l.walk.FrameInstr = uint16(get(frameType, "f_lasti"))
			}
			if err := errors.Join(errs...); err != nil {
				return nil, fmt.Errorf("reading CPython %s's frames: %w", v, err)
			}
		}
	}
	if l.codeSize > maxCodeHeader || l.bytesSize > 24-8 {
		return nil, fmt.Errorf("CPython %s: code objects of %d bytes, bytes' size at %d: out of bounds", v, l.codeSize, l.bytesSize)
	}
	for _, off := range []uint64{l.coName, l.coQualname, l.coFilename, l.coFirstLine, l.coLineTable} {
		if off > l.codeSize || l.codeSize-off < 8 {
			return nil, fmt.Errorf("CPython %s: a code object field at %d, past its %d bytes", v, off, l.codeSize)
		}
	}
	l.walk.CodeInsns = uint16(l.codeInsns)
	l.walk.FrameBytes = frameBytes(&l.walk)
	return l, nil
}

// frameBytes is how much of a frame the walk reads: up to its last field.
func frameBytes(w *profiler.PythonProc) uint16 {
	end := max(w.FramePrevious+8, w.FrameCode+8, w.FrameInstr+8)
	if w.Layout != profiler.PythonFrameObjects {
		end = max(end, w.Entry+1)
	}
	return (end + 7) &^ 7
}

// debugCookie starts _Py_DebugOffsets, at the start of _PyRuntime.
var debugCookie = []byte("xdebugpy")

// The _Py_DebugOffsets of 3.13 (Include/internal/pycore_runtime.h): a
// struct of uint64 offsets, each group led by its struct's size. These
// are the positions of the fields read, in 8-byte words.
const (
	debugVersion          = 1
	debugFreeThreaded     = 2
	debugTStateFrame      = 23 // thread_state.current_frame
	debugFramePrevious    = 29 // interpreter_frame.previous
	debugFrameExecutable  = 30
	debugFrameInstr       = 31
	debugFrameOwner       = 33
	debugCodeFilename     = 35 // code_object.filename
	debugCodeName         = 36
	debugCodeQualname     = 37
	debugCodeLinetable    = 38
	debugCodeFirstlineno  = 39
	debugCodeCodeAdaptive = 43
	debugPyObjectSize     = 44 // pyobject.size, sizeof(PyObject)
	debugPyObjectType     = 45 // pyobject.ob_type
	debugBytesSize        = 65 // bytes_object.ob_size
	debugBytesData        = 66
	debugASCIISize        = 70 // unicode_object.asciiobject_size
	debugWords            = 73
)

// fromDebugOffsets reads the offsets 3.13 publishes in _Py_DebugOffsets,
// and checks that the type objects agree where both say.
func (l *layout) fromDebugOffsets(img *elfimage.Image) error {
	rt, ok := img.Symbol("_PyRuntime")
	if !ok {
		return errors.New("no _PyRuntime")
	}
	var raw [debugWords * 8]byte
	if err := img.Read(rt.Value, raw[:]); err != nil {
		return fmt.Errorf("reading _Py_DebugOffsets: %w", err)
	}
	if !bytes.Equal(raw[:8], debugCookie) {
		return fmt.Errorf("_PyRuntime starts with %q, not _Py_DebugOffsets", raw[:8])
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(raw[i*8:]) }
	hex := word(debugVersion)
	if got := (Version{int(hex >> 24 & 0xff), int(hex >> 16 & 0xff)}); got != l.version {
		return fmt.Errorf("_Py_DebugOffsets of CPython %s in CPython %s", got, l.version)
	}
	// A struct of another shape reads other words here.
	if word(debugPyObjectSize) != 16 || word(debugPyObjectType) != obType {
		return fmt.Errorf("_Py_DebugOffsets of an unknown shape: PyObject of %d bytes, ob_type at %d", word(debugPyObjectSize), word(debugPyObjectType))
	}
	if word(debugFreeThreaded) != 0 {
		return fmt.Errorf("CPython %s free-threaded build: %w", l.version, ErrUnsupportedVersion)
	}
	small := func(vals ...uint64) bool {
		for _, v := range vals {
			if v > 0xfff {
				return false
			}
		}
		return true
	}
	tstate, prev, exec, instr, owner := word(debugTStateFrame), word(debugFramePrevious), word(debugFrameExecutable), word(debugFrameInstr), word(debugFrameOwner)
	if !small(tstate, prev, exec, instr, owner) {
		return fmt.Errorf("_Py_DebugOffsets with frame offsets out of bounds (%d %d %d %d %d)", tstate, prev, exec, instr, owner)
	}
	l.walk = profiler.PythonProc{
		TStateFrame: uint16(tstate), CFrameFrame: profiler.PythonNoOffset, Layout: profiler.PythonFrameShim,
		FramePrevious: uint16(prev), FrameCode: uint16(exec), FrameInstr: uint16(instr), Entry: uint16(owner),
		ShimOwner: shimOwner,
	}
	for _, c := range []struct {
		name         string
		debug, type_ uint64
	}{
		{"co_filename", word(debugCodeFilename), l.coFilename},
		{"co_name", word(debugCodeName), l.coName},
		{"co_qualname", word(debugCodeQualname), l.coQualname},
		{"co_linetable", word(debugCodeLinetable), l.coLineTable},
		{"co_firstlineno", word(debugCodeFirstlineno), l.coFirstLine},
		{"co_code_adaptive", word(debugCodeCodeAdaptive), l.codeInsns},
		{"bytes ob_size", word(debugBytesSize), l.bytesSize},
		{"bytes ob_sval", word(debugBytesData), l.bytesData},
		{"str data", word(debugASCIISize), l.asciiData},
	} {
		if c.debug != c.type_ {
			return fmt.Errorf("_Py_DebugOffsets puts %s at %d, the type objects at %d", c.name, c.debug, c.type_)
		}
	}
	return nil
}
