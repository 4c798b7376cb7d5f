package python

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bpfcol/bpfcol/internal/interp"
)

// Bounds on what is read of one code object: whatever its process's
// memory says, naming one frame allocates at most about this much.
const (
	maxCodeHeader  = 512      // the code object's fixed part
	maxNameLen     = 1 << 10  // a qualified name, in characters
	maxFileLen     = 4 << 10  // a file name, in characters
	maxLineTable   = 64 << 10 // a line table, in bytes
	strHeaderBytes = 48       // enough of a str object for its length and state
)

// remote reads a process's memory.
type remote interface {
	Read(addr uint64, buf []byte) error
}

// objectTypes are the runtime addresses of the type objects a read
// checks its objects against.
type objectTypes struct {
	code, str, bytes uint64
}

// codeReader reads the code objects of one process.
type codeReader struct {
	l     *layout
	mem   remote
	types objectTypes
}

// errNotCode is returned for an address that holds no code object (any
// more): another object, or freed memory.
var errNotCode = errors.New("not a code object")

// codeTable is a code object's line table.
type codeTable struct {
	kind  lineTable
	first int64
	table []byte
}

func (t *codeTable) Line(offset uint32) int64 {
	switch t.kind {
	case lnotab:
		return lnotabLine(t.table, t.first, offset)
	case linetable310:
		return linetable310Line(t.table, t.first, offset)
	case locations:
		return locationsLine(t.table, t.first, offset)
	}
	return 0
}

// header reads the fixed part of the code object at addr.
func (r *codeReader) header(addr uint64) ([]byte, error) {
	size := min(r.l.codeSize, maxCodeHeader)
	h := make([]byte, size)
	if err := r.mem.Read(addr, h); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint64(h[obType:]) != r.types.code {
		return nil, errNotCode
	}
	return h, nil
}

// field reads the 8-byte field at off of a header.
func field(h []byte, off uint64) uint64 {
	// off comes from the process: compared so that it cannot wrap.
	if off > uint64(len(h)) || uint64(len(h))-off < 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(h[off:])
}

// identity is what tells a code object from another later allocated at
// its address: its type, the objects it names, and its name's length and
// hash (a name freed with it may be replaced at its address too).
func (r *codeReader) identity(h []byte) ([]byte, error) {
	id := make([]byte, 0, 64)
	for _, off := range []uint64{obType, r.l.coName, r.l.coFilename, r.l.coLineTable} {
		id = binary.LittleEndian.AppendUint64(id, field(h, off))
	}
	if r.l.hasQual {
		id = binary.LittleEndian.AppendUint64(id, field(h, r.l.coQualname))
	}
	id = binary.LittleEndian.AppendUint32(id, uint32(field(h, r.l.coFirstLine)))
	var name [strState]byte
	if err := r.mem.Read(field(h, r.l.coName), name[:]); err != nil {
		return nil, err
	}
	return append(id, name[strLength:]...), nil
}

// Identity reads what identity held for the code object at addr.
func (r *codeReader) Identity(addr uint64) ([]byte, error) {
	h, err := r.header(addr)
	if err != nil {
		return nil, err
	}
	return r.identity(h)
}

// Object reads the code object at addr: its qualified name (3.11+, its
// name before), file name and line table.
func (r *codeReader) Object(addr uint64) (*interp.Object, error) {
	h, err := r.header(addr)
	if err != nil {
		return nil, err
	}
	var name string
	if r.l.hasQual {
		name, err = r.str(field(h, r.l.coQualname), maxNameLen)
	}
	if !r.l.hasQual || err != nil || name == "" {
		if name, err = r.str(field(h, r.l.coName), maxNameLen); err != nil {
			return nil, fmt.Errorf("reading the name of code object %#x: %w", addr, err)
		}
	}
	file, err := r.str(field(h, r.l.coFilename), maxFileLen)
	if err != nil {
		return nil, fmt.Errorf("reading the file name of code object %#x: %w", addr, err)
	}
	table, err := r.bytes(field(h, r.l.coLineTable), maxLineTable)
	if err != nil {
		return nil, fmt.Errorf("reading the line table of code object %#x: %w", addr, err)
	}
	first := int64(int32(binary.LittleEndian.Uint32(h[min(r.l.coFirstLine, uint64(len(h))-4):])))
	id, err := r.identity(h)
	if err != nil {
		return nil, fmt.Errorf("reading code object %#x: %w", addr, err)
	}
	obj := &interp.Object{
		Name:     name,
		File:     file,
		Lines:    &codeTable{kind: r.l.lines, first: first, table: table},
		Identity: id,
	}
	obj.Bytes = int64(len(name) + len(file) + len(table) + len(obj.Identity) + 64)
	return obj, nil
}

// str reads the str object at addr: at most max characters, as UTF-8.
func (r *codeReader) str(addr uint64, max int) (string, error) {
	if addr == 0 {
		return "", errors.New("no string")
	}
	var h [strHeaderBytes]byte
	if err := r.mem.Read(addr, h[:]); err != nil {
		return "", err
	}
	if binary.LittleEndian.Uint64(h[obType:]) != r.types.str {
		return "", errors.New("not a str object")
	}
	n := binary.LittleEndian.Uint64(h[strLength:])
	state := binary.LittleEndian.Uint32(h[strState:])
	kind, compact, ascii := state>>2&7, state>>5&1 == 1, state>>6&1 == 1
	if !compact {
		return "", errors.New("a str not stored compact")
	}
	if n > uint64(max) {
		return "", fmt.Errorf("a str of %d characters, more than %d", n, max)
	}
	data := addr + r.l.compactData
	if ascii {
		data = addr + r.l.asciiData
	}
	switch kind {
	case 1, 2, 4:
	default:
		return "", fmt.Errorf("a str of %d-byte characters", kind)
	}
	if ascii && kind != 1 {
		return "", errors.New("an ASCII str of wide characters")
	}
	raw := make([]byte, n*uint64(kind))
	if err := r.mem.Read(data, raw); err != nil {
		return "", err
	}
	return decodeStr(raw, int(kind)), nil
}

// decodeStr turns a str's characters, kind bytes each (Latin-1, UCS-2,
// UCS-4), into UTF-8; invalid code points become U+FFFD.
func decodeStr(raw []byte, kind int) string {
	if kind == 1 {
		ascii := true
		for _, c := range raw {
			if c >= 0x80 {
				ascii = false
				break
			}
		}
		if ascii {
			return string(raw)
		}
	}
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i+kind <= len(raw); i += kind {
		var c rune
		switch kind {
		case 1:
			c = rune(raw[i])
		case 2:
			c = rune(binary.LittleEndian.Uint16(raw[i:]))
		case 4:
			c = rune(binary.LittleEndian.Uint32(raw[i:]))
		}
		if !utf8.ValidRune(c) {
			c = utf8.RuneError
		}
		b.WriteRune(c)
	}
	return b.String()
}

// bytes reads the contents of the bytes object at addr, at most max.
func (r *codeReader) bytes(addr uint64, max int) ([]byte, error) {
	if addr == 0 {
		return nil, errors.New("no bytes object")
	}
	var h [24]byte
	if err := r.mem.Read(addr, h[:]); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint64(h[obType:]) != r.types.bytes {
		return nil, errors.New("not a bytes object")
	}
	n := binary.LittleEndian.Uint64(h[r.l.bytesSize:])
	if n > uint64(max) {
		return nil, fmt.Errorf("a bytes object of %d bytes, more than %d", n, max)
	}
	out := make([]byte, n)
	if err := r.mem.Read(addr+r.l.bytesData, out); err != nil {
		return nil, err
	}
	return out, nil
}
