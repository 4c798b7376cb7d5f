package python

import (
	"fmt"

	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
)

// PyTypeObject and PyMemberDef are part of CPython's C API, laid out the
// same on every 64-bit CPython 3: no binary describes them, so their
// offsets are written here (Include/cpython/object.h,
// Include/descrobject.h or structmember.h).
const (
	typeName      = 24  // tp_name: const char *
	typeBasicSize = 32  // tp_basicsize: Py_ssize_t
	typeMembers   = 240 // tp_members: PyMemberDef *
	memberSize    = 40  // sizeof(PyMemberDef)
	memberName    = 0   // name: const char *
	memberOffset  = 16  // offset: Py_ssize_t
	// maxMembers bounds the members read of one type: code has about 20.
	maxMembers = 64
	// maxNameBytes bounds a member's or a type's name.
	maxNameBytes = 64
)

// typeInfo is what a type object tells of its instances: its name, the
// size of their fixed part, and their members' offsets by name.
type typeInfo struct {
	name      string
	basicSize uint64
	members   map[string]uint64
}

// readType reads the type object that symbol names in img: its tp_name,
// tp_basicsize and the offsets its tp_members table gives.
func readType(img *elfimage.Image, symbol string) (*typeInfo, error) {
	sym, ok := img.Symbol(symbol)
	if !ok {
		return nil, fmt.Errorf("no %s", symbol)
	}
	namePtr, err := img.Pointer(sym.Value + typeName)
	if err != nil {
		return nil, fmt.Errorf("reading %s.tp_name: %w", symbol, err)
	}
	name, err := img.CString(namePtr, maxNameBytes)
	if err != nil {
		return nil, fmt.Errorf("reading %s.tp_name: %w", symbol, err)
	}
	size, err := img.Uint64(sym.Value + typeBasicSize)
	if err != nil {
		return nil, fmt.Errorf("reading %s.tp_basicsize: %w", symbol, err)
	}
	t := &typeInfo{name: name, basicSize: size, members: map[string]uint64{}}
	table, err := img.Pointer(sym.Value + typeMembers)
	if err != nil {
		return nil, fmt.Errorf("reading %s.tp_members: %w", symbol, err)
	}
	if table == 0 {
		return t, nil
	}
	for i := range maxMembers {
		entry := table + uint64(i)*memberSize
		np, err := img.Pointer(entry + memberName)
		if err != nil {
			return nil, fmt.Errorf("reading %s.tp_members[%d]: %w", symbol, i, err)
		}
		if np == 0 {
			return t, nil
		}
		mname, err := img.CString(np, maxNameBytes)
		if err != nil {
			return nil, fmt.Errorf("reading %s.tp_members[%d].name: %w", symbol, i, err)
		}
		off, err := img.Uint64(entry + memberOffset)
		if err != nil {
			return nil, fmt.Errorf("reading %s.tp_members[%d].offset: %w", symbol, i, err)
		}
		t.members[mname] = off
	}
	return nil, fmt.Errorf("reading %s.tp_members: more than %d members", symbol, maxMembers)
}
