package hotspot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// HotSpot describes its own data structures to debuggers (the
// Serviceability Agent) in four tables libjvm.so exports: the fields of
// its C++ classes (gHotSpotVMStructs), their sizes (gHotSpotVMTypes), and
// named int and long constants. Each is an array of C structs ended by an
// entry with a NULL name, whose stride and field offsets libjvm exports too
// (gHotSpotVMStructEntryArrayStride, ...). The tables and those offsets are
// filled by libjvm's static initializers, so they are read from a running
// process, never from the file.

// Bounds on what the tables may make us read: whatever a process holds,
// reading them allocates at most about maxEntries * (stride + names).
const (
	maxEntries   = 1 << 13 // entries of one table (JDK 17: 2800 fields)
	maxStride    = 256     // bytes of one entry
	maxNameBytes = 128     // a type, field or constant name
	maxNamesRead = 1 << 20 // the names of all four tables, in bytes
	tableChunk   = 64 << 10
)

// Field is one field of a HotSpot class: its offset in the object, or the
// address of a static field.
type Field struct {
	Offset  uint64
	Address uint64
	Static  bool
}

// VMStructs is what the tables say, by name.
type VMStructs struct {
	// Fields maps "Type::field" to the field.
	Fields map[string]Field
	// Sizes maps a type name to its size in bytes.
	Sizes map[string]uint64
	// Ints and Longs are the named constants.
	Ints  map[string]int64
	Longs map[string]int64
}

// memory reads a process's memory.
type memory interface {
	Read(addr uint64, buf []byte) error
}

// tableSymbols are the runtime addresses of the exported symbols of one
// table: the pointer to its first entry, its stride, and the offsets of
// the entry's members (0: the table has no such member).
type tableSymbols struct {
	base, stride                       uint64
	name, field, static, offset, value uint64
}

// errNotReady is returned while libjvm's static initializers have not run:
// the tables are not filled yet.
var errNotReady = errors.New("libjvm's introspection tables are not initialized yet")

// readVMStructs reads the four tables through mem, syms giving the runtime
// address of each exported symbol by name.
func readVMStructs(mem memory, syms func(string) (uint64, bool)) (*VMStructs, error) {
	look := func(names ...string) (tableSymbols, error) {
		var addrs [7]uint64
		for i, n := range names {
			if n == "" {
				continue
			}
			a, ok := syms(n)
			if !ok {
				return tableSymbols{}, fmt.Errorf("libjvm exports no %s", n)
			}
			addrs[i] = a
		}
		return tableSymbols{addrs[0], addrs[1], addrs[2], addrs[3], addrs[4], addrs[5], addrs[6]}, nil
	}
	structs, err := look("gHotSpotVMStructs", "gHotSpotVMStructEntryArrayStride", "gHotSpotVMStructEntryTypeNameOffset",
		"gHotSpotVMStructEntryFieldNameOffset", "gHotSpotVMStructEntryIsStaticOffset", "gHotSpotVMStructEntryOffsetOffset",
		"gHotSpotVMStructEntryAddressOffset")
	if err != nil {
		return nil, err
	}
	types, err := look("gHotSpotVMTypes", "gHotSpotVMTypeEntryArrayStride", "gHotSpotVMTypeEntryTypeNameOffset",
		"", "", "gHotSpotVMTypeEntrySizeOffset", "")
	if err != nil {
		return nil, err
	}
	ints, err := look("gHotSpotVMIntConstants", "gHotSpotVMIntConstantEntryArrayStride", "gHotSpotVMIntConstantEntryNameOffset",
		"", "", "", "gHotSpotVMIntConstantEntryValueOffset")
	if err != nil {
		return nil, err
	}
	longs, err := look("gHotSpotVMLongConstants", "gHotSpotVMLongConstantEntryArrayStride", "gHotSpotVMLongConstantEntryNameOffset",
		"", "", "", "gHotSpotVMLongConstantEntryValueOffset")
	if err != nil {
		return nil, err
	}
	vs := &VMStructs{Fields: map[string]Field{}, Sizes: map[string]uint64{}, Ints: map[string]int64{}, Longs: map[string]int64{}}
	names := &nameReader{mem: mem, cache: map[uint64]string{}}
	err = readTable(mem, structs, func(e []byte, t *tableLayout) error {
		typ, err := names.read(t.ptr(e, t.name))
		if err != nil || typ == "" {
			return err
		}
		field, err := names.read(t.ptr(e, t.field))
		if err != nil || field == "" {
			return err
		}
		f := Field{Static: t.u32(e, t.static) != 0}
		if f.Static {
			f.Address = t.ptr(e, t.value)
		} else {
			f.Offset = t.u64(e, t.offset)
		}
		vs.Fields[typ+"::"+field] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading gHotSpotVMStructs: %w", err)
	}
	err = readTable(mem, types, func(e []byte, t *tableLayout) error {
		typ, err := names.read(t.ptr(e, t.name))
		if err != nil || typ == "" {
			return err
		}
		vs.Sizes[typ] = t.u64(e, t.offset)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading gHotSpotVMTypes: %w", err)
	}
	for _, c := range []struct {
		syms tableSymbols
		out  map[string]int64
		wide bool
	}{{ints, vs.Ints, false}, {longs, vs.Longs, true}} {
		err = readTable(mem, c.syms, func(e []byte, t *tableLayout) error {
			name, err := names.read(t.ptr(e, t.name))
			if err != nil || name == "" {
				return err
			}
			if c.wide {
				c.out[name] = int64(t.u64(e, t.value))
			} else {
				c.out[name] = int64(int32(t.u32(e, t.value)))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading the constants: %w", err)
		}
	}
	return vs, nil
}

// tableLayout is one table's stride and member offsets, as read from the
// process: each member fits within the stride.
type tableLayout struct {
	stride                             uint64
	name, field, static, offset, value uint64
}

func (t *tableLayout) ptr(e []byte, off uint64) uint64 { return t.u64(e, off) }

func (t *tableLayout) u64(e []byte, off uint64) uint64 { return u64(e, off) }

func (t *tableLayout) u32(e []byte, off uint64) uint32 { return u32(e, off) }

// readTable calls each for every entry of a table until the entry whose
// name pointer is NULL.
func readTable(mem memory, s tableSymbols, each func(e []byte, t *tableLayout) error) error {
	word := func(addr uint64) (uint64, error) {
		if addr == 0 {
			return 0, nil
		}
		var b [8]byte
		if err := mem.Read(addr, b[:]); err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	var vals [7]uint64
	for i, a := range []uint64{s.base, s.stride, s.name, s.field, s.static, s.offset, s.value} {
		v, err := word(a)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	base := vals[0]
	t := tableLayout{stride: vals[1], name: vals[2], field: vals[3], static: vals[4], offset: vals[5], value: vals[6]}
	if base == 0 || t.stride == 0 {
		return errNotReady
	}
	if t.stride > maxStride || t.stride%8 != 0 {
		return fmt.Errorf("entry stride %d: not a multiple of 8 up to %d", t.stride, maxStride)
	}
	for _, m := range []struct {
		name     string
		off, len uint64
		present  bool
	}{
		{"name", t.name, 8, true},
		{"field name", t.field, 8, s.field != 0},
		{"static flag", t.static, 4, s.static != 0},
		{"offset", t.offset, 8, s.offset != 0},
		{"value", t.value, 4, s.value != 0},
	} {
		if m.present && (m.off > t.stride || t.stride-m.off < m.len) {
			return fmt.Errorf("entry's %s at %d is beyond its stride %d", m.name, m.off, t.stride)
		}
	}
	perChunk := tableChunk / t.stride
	buf := make([]byte, perChunk*t.stride)
	for i := uint64(0); i < maxEntries; i += perChunk {
		n := min(perChunk, maxEntries-i)
		chunk := buf[:n*t.stride]
		addr := base + i*t.stride
		if addr < base {
			return errors.New("table wraps around the address space")
		}
		if err := mem.Read(addr, chunk); err != nil {
			// The table's end may lie closer to unmapped memory than a
			// chunk: read entry by entry from here.
			chunk = chunk[:0]
			for j := uint64(0); j < n; j++ {
				e := buf[j*t.stride : (j+1)*t.stride]
				if err := mem.Read(addr+j*t.stride, e); err != nil {
					if j == 0 && i == 0 {
						return err
					}
					return fmt.Errorf("table ends without its NULL entry: %w", err)
				}
				chunk = buf[:(j+1)*t.stride]
				if t.ptr(e, t.name) == 0 {
					break
				}
			}
		}
		for j := uint64(0); j+t.stride <= uint64(len(chunk)); j += t.stride {
			e := chunk[j : j+t.stride]
			if t.ptr(e, t.name) == 0 {
				return nil
			}
			if err := each(e, &t); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("more than %d entries", maxEntries)
}

// nameReader reads the NUL-terminated names the tables point to; most
// entries share their type's name.
type nameReader struct {
	mem   memory
	cache map[uint64]string
	total int // bytes of names read, against maxNamesRead
}

func (r *nameReader) read(addr uint64) (string, error) {
	if addr == 0 {
		return "", nil
	}
	if s, ok := r.cache[addr]; ok {
		return s, nil
	}
	var sb strings.Builder
	var chunk [64]byte
	for sb.Len() < maxNameBytes {
		// Read up to the next 64-byte boundary: a name ending right
		// before unmapped memory is still read.
		a := addr + uint64(sb.Len())
		n := 64 - a%64
		if err := r.mem.Read(a, chunk[:n]); err != nil {
			return "", fmt.Errorf("reading a name at %#x: %w", addr, err)
		}
		r.total += int(n)
		if r.total > maxNamesRead {
			return "", fmt.Errorf("names beyond %d bytes in all", maxNamesRead)
		}
		for _, c := range chunk[:n] {
			if c == 0 {
				s := sb.String()
				r.cache[addr] = s
				return s, nil
			}
			if c < 0x20 || c > 0x7e {
				return "", fmt.Errorf("name at %#x: byte %#x is not printable ASCII", addr, c)
			}
			sb.WriteByte(c)
		}
	}
	return "", fmt.Errorf("name at %#x: longer than %d bytes", addr, maxNameBytes)
}
