package hotspot

import (
	"encoding/binary"
	"errors"
)

// fakeMemory is a process's memory: bytes from base.
type fakeMemory struct {
	base uint64
	mem  []byte
	read int // bytes read, to check the bounds hold
}

func (m *fakeMemory) Read(addr uint64, buf []byte) error {
	m.read += len(buf)
	if addr < m.base || addr-m.base > uint64(len(m.mem)) || uint64(len(buf)) > uint64(len(m.mem))-(addr-m.base) {
		return errors.New("not mapped")
	}
	copy(buf, m.mem[addr-m.base:])
	return nil
}

// fakeEntry is one field of a fake gHotSpotVMStructs.
type fakeEntry struct {
	typ, field string
	static     bool
	value      uint64 // offset, or address
}

// Where the fake libjvm keeps its tables, as HotSpot 17 lays out their
// entries: VMStructEntry {typeName, fieldName, typeString, isStatic,
// offset, address}, VMTypeEntry {typeName, superclassName, isOopType,
// isIntegerType, isUnsigned, size}, constants {name, value}.
const (
	fakeBase    = 0x10000
	fakeSymbols = 0      // the exported variables, 8 bytes each
	fakeStrings = 0x1000 // names
	fakeStructs = 0x8000
	fakeTypes   = 0x10000
	fakeInts    = 0x14000
	fakeLongs   = 0x16000
	fakeSize    = 0x18000
)

// fakeTables lays out tables of fields, types (sizes) and int constants
// in a fake process's memory; syms gives the address of each exported
// variable.
type fakeTables struct {
	mem     *fakeMemory
	syms    map[string]uint64
	strings uint64
	entries []fakeEntry
}

// fields returns the fields the tables were made of.
func (f *fakeTables) fields() []fakeEntry { return f.entries }

func newFakeTables(fields []fakeEntry, sizes map[string]uint64, ints map[string]int64) *fakeTables {
	f := &fakeTables{mem: &fakeMemory{base: fakeBase, mem: make([]byte, fakeSize)}, syms: map[string]uint64{}, strings: fakeStrings, entries: fields}
	next := uint64(fakeSymbols)
	variable := func(name string, v uint64) {
		binary.LittleEndian.PutUint64(f.mem.mem[next:], v)
		f.syms[name] = fakeBase + next
		next += 8
	}
	variable("gHotSpotVMStructs", fakeBase+fakeStructs)
	variable("gHotSpotVMStructEntryArrayStride", 48)
	variable("gHotSpotVMStructEntryTypeNameOffset", 0)
	variable("gHotSpotVMStructEntryFieldNameOffset", 8)
	variable("gHotSpotVMStructEntryIsStaticOffset", 24)
	variable("gHotSpotVMStructEntryOffsetOffset", 32)
	variable("gHotSpotVMStructEntryAddressOffset", 40)
	variable("gHotSpotVMTypes", fakeBase+fakeTypes)
	variable("gHotSpotVMTypeEntryArrayStride", 40)
	variable("gHotSpotVMTypeEntryTypeNameOffset", 0)
	variable("gHotSpotVMTypeEntrySizeOffset", 32)
	variable("gHotSpotVMIntConstants", fakeBase+fakeInts)
	variable("gHotSpotVMIntConstantEntryArrayStride", 16)
	variable("gHotSpotVMIntConstantEntryNameOffset", 0)
	variable("gHotSpotVMIntConstantEntryValueOffset", 8)
	variable("gHotSpotVMLongConstants", fakeBase+fakeLongs)
	variable("gHotSpotVMLongConstantEntryArrayStride", 16)
	variable("gHotSpotVMLongConstantEntryNameOffset", 0)
	variable("gHotSpotVMLongConstantEntryValueOffset", 8)
	for i, e := range fields {
		at := fakeStructs + uint64(i)*48
		f.put(at, f.str(e.typ))
		f.put(at+8, f.str(e.field))
		if e.static {
			f.mem.mem[at+24] = 1
			f.put(at+40, e.value)
		} else {
			f.put(at+32, e.value)
		}
	}
	i := uint64(0)
	for name, size := range sizes {
		f.put(fakeTypes+i*40, f.str(name))
		f.put(fakeTypes+i*40+32, size)
		i++
	}
	i = 0
	for name, v := range ints {
		f.put(fakeInts+i*16, f.str(name))
		f.put(fakeInts+i*16+8, uint64(v))
		i++
	}
	return f
}

func (f *fakeTables) put(off, v uint64) { binary.LittleEndian.PutUint64(f.mem.mem[off:], v) }

// str writes s in the names area and returns its address.
func (f *fakeTables) str(s string) uint64 {
	at := f.strings
	copy(f.mem.mem[at:], s)
	f.mem.mem[at+uint64(len(s))] = 0
	f.strings += uint64(len(s)) + 1
	return fakeBase + at
}

func (f *fakeTables) symbol(name string) (uint64, bool) {
	a, ok := f.syms[name]
	return a, ok
}
