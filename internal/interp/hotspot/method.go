package hotspot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Bounds on what naming one method reads, whatever the process's memory
// says.
const (
	maxSymbol    = 4 << 10  // a class, method or file name, or a descriptor
	maxLineTable = 64 << 10 // a compressed line table
	lineChunk    = 256
	symbolChunk  = 128
)

// method is what names the frames of one Java method.
type method struct {
	// name is the method rendered as Java does, file its class's source
	// file ("" when the class has none).
	name, file string
	lines      []lineRow
	// constMethod is the method's ConstMethod: a Method freed and another
	// allocated at its address has another.
	constMethod uint64
}

func (m *method) bytes() int64 {
	return int64(unsafe.Sizeof(*m)) + int64(len(m.name)+len(m.file)) + int64(len(m.lines))*int64(unsafe.Sizeof(lineRow{}))
}

// line returns the source line of bytecode index bci, 0 when unknown.
func (m *method) line(bci int32) int64 {
	if bci < 0 {
		bci = 0
	}
	return int64(lineOf(m.lines, int(bci)))
}

// errNotMethod is returned for an address that holds no Method (any
// more): its class does not list it.
var errNotMethod = errors.New("not a live Method")

// reader reads a JVM's structures from its memory.
type reader struct {
	l   *layout
	mem memory
}

func (r *reader) read(addr uint64, n uint64) ([]byte, error) {
	if addr == 0 {
		return nil, errors.New("reading a NULL pointer")
	}
	b := make([]byte, n)
	if err := r.mem.Read(addr, b); err != nil {
		return nil, err
	}
	return b, nil
}

// u64, u32 and u16 read at an offset the process gave: one past the end,
// or so large that adding the width wraps around, reads as 0.
func u64(b []byte, off uint64) uint64 {
	if !fits(b, off, 8) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[off:])
}

func u32(b []byte, off uint64) uint32 {
	if !fits(b, off, 4) {
		return 0
	}
	return binary.LittleEndian.Uint32(b[off:])
}

func u16(b []byte, off uint64) uint16 {
	if !fits(b, off, 2) {
		return 0
	}
	return binary.LittleEndian.Uint16(b[off:])
}

// fits reports whether n bytes at off lie within b, without wrapping.
func fits(b []byte, off, n uint64) bool {
	return off <= uint64(len(b)) && uint64(len(b))-off >= n
}

// constMethodOf reads the ConstMethod pointer of the Method at addr.
func (r *reader) constMethodOf(addr uint64) (uint64, error) {
	b, err := r.read(addr+r.l.methodConst, 8)
	if err != nil {
		return 0, err
	}
	return u64(b, 0), nil
}

// method reads the Method at addr: its class, name, descriptor, source
// file and line table. The Method is checked against its class's list of
// methods, so freed memory is never named.
func (r *reader) method(addr uint64, symbols *symbolCache) (*method, error) {
	l := r.l
	cm, err := r.constMethodOf(addr)
	if err != nil {
		return nil, err
	}
	c, err := r.read(cm, l.constSize)
	if err != nil {
		return nil, fmt.Errorf("reading ConstMethod: %w", err)
	}
	poolAddr := u64(c, l.constConstants)
	pool, err := r.read(poolAddr, l.poolSize)
	if err != nil {
		return nil, fmt.Errorf("reading ConstantPool: %w", err)
	}
	poolLen := u32(pool, l.poolLength)
	klass := u64(pool, l.poolHolder)
	// The method's class lists it at its id number: a Method freed and
	// its memory reused is not there.
	idnum := uint64(u16(c, l.constIDNum))
	methods, err := r.read(klass+l.klassMethods, 8)
	if err != nil {
		return nil, fmt.Errorf("reading the class's methods: %w", err)
	}
	arr := u64(methods, 0)
	n, err := r.read(arr+l.methodArrayLen, 4)
	if err != nil {
		return nil, fmt.Errorf("reading the class's methods: %w", err)
	}
	if idnum >= uint64(u32(n, 0)) {
		return nil, errNotMethod
	}
	slot, err := r.read(arr+l.methodArrayData+8*idnum, 8)
	if err != nil {
		return nil, err
	}
	if u64(slot, 0) != addr {
		return nil, errNotMethod
	}

	entry := func(idx uint16) (string, error) {
		if idx == 0 || uint32(idx) >= poolLen {
			return "", fmt.Errorf("constant pool index %d: outside [1, %d)", idx, poolLen)
		}
		p, err := r.read(poolAddr+l.poolSize+8*uint64(idx), 8)
		if err != nil {
			return "", err
		}
		// The low bit tags some entries: a Symbol* is aligned.
		return symbols.get(r, u64(p, 0)&^1)
	}
	name, err := entry(u16(c, l.constName))
	if err != nil {
		return nil, fmt.Errorf("reading the method's name: %w", err)
	}
	desc, err := entry(u16(c, l.constSignature))
	if err != nil {
		return nil, fmt.Errorf("reading the method's descriptor: %w", err)
	}
	k, err := r.read(klass+l.klassName, 8)
	if err != nil {
		return nil, err
	}
	kname, err := symbols.get(r, u64(k, 0))
	if err != nil {
		return nil, fmt.Errorf("reading the class's name: %w", err)
	}
	m := &method{constMethod: cm}
	if m.name, err = methodName(kname, name, desc); err != nil {
		return nil, fmt.Errorf("method %s.%s%q: %w", kname, name, desc, err)
	}
	// A class compiled without debug information has no source file.
	if idx := u16(pool, l.poolSourceFile); idx != 0 {
		m.file, _ = entry(idx)
	}
	if uint64(u16(c, l.constFlags))&l.hasLineTable != 0 {
		table := cm + l.constSize + uint64(u16(c, l.constCodeSize))
		m.lines = r.lineTable(table)
	}
	return m, nil
}

// lineTable reads the compressed line table at addr, as far as it can.
func (r *reader) lineTable(addr uint64) []lineRow {
	var buf []byte
	for len(buf) < maxLineTable {
		chunk := make([]byte, lineChunk)
		if err := r.mem.Read(addr+uint64(len(buf)), chunk); err != nil {
			// The table may end right before unmapped memory.
			chunk = chunk[:1]
			if err := r.mem.Read(addr+uint64(len(buf)), chunk); err != nil {
				return nil
			}
		}
		buf = append(buf, chunk...)
		rows, _, err := decodeLineTable(buf, r.l.unsigned5Excluded)
		if err == nil {
			return rows
		}
		if !errors.Is(err, errStream) {
			return nil
		}
	}
	return nil
}

// symbol reads the Symbol at addr: a length, then that many bytes of
// modified UTF-8.
func (r *reader) symbol(addr uint64) (string, error) {
	l := r.l
	head, err := r.read(addr, symbolChunk)
	if err != nil {
		// A short symbol may end right before unmapped memory.
		if head, err = r.read(addr, l.symbolBody); err != nil {
			return "", err
		}
	}
	n := uint64(u16(head, l.symbolLength))
	if n > maxSymbol {
		return "", fmt.Errorf("symbol of %d bytes: more than %d", n, maxSymbol)
	}
	body := make([]byte, n)
	have := copy(body, head[min(l.symbolBody, uint64(len(head))):])
	if uint64(have) < n {
		if err := r.mem.Read(addr+l.symbolBody+uint64(have), body[have:]); err != nil {
			return "", err
		}
	}
	for _, c := range body {
		if c == 0 {
			return "", errors.New("symbol holds a NUL byte")
		}
	}
	return string(body), nil
}
