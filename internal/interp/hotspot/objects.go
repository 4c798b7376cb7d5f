package hotspot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/interp"
)

// The objects the sampler names a HotSpot frame with (the low 48 bits of
// its object, profiler.HotSpotIdentity) are code blobs when they lie in
// the code cache, an nmethod or a stub, and interpreted Method*s
// otherwise.

// maxBlobName bounds a code blob's name.
const maxBlobName = 128

// callStub names the frame of the stub through which native code calls
// Java (JavaCalls::call_helper's call into the call stub).
const callStub = "StubRoutines::call_stub"

// errStale is returned for an object whose identity no longer matches the
// one the sampler read: freed, and its memory reused.
var errStale = errors.New("object replaced since it was sampled")

// Object implements interp.Instance.
func (in *instance) Object(object uint64) (*interp.Object, error) {
	addr, check := profiler.HotSpotIdentity(object)
	if addr >= in.cache.low && addr < in.cache.high {
		return in.blob(addr, check)
	}
	m, err := in.method(addr)
	if err != nil {
		return nil, err
	}
	if uint16(m.constMethod>>3) != check {
		return nil, errStale
	}
	return &interp.Object{
		Name:     m.name,
		File:     m.file,
		Lines:    bytecodeLines{m},
		Identity: binary.LittleEndian.AppendUint64(nil, m.constMethod),
		Bytes:    m.bytes(),
	}, nil
}

// Identity implements interp.Instance: what Object's Identity holds, read
// again.
func (in *instance) Identity(object uint64) ([]byte, error) {
	addr, _ := profiler.HotSpotIdentity(object)
	l := in.reader.l
	if addr >= in.cache.low && addr < in.cache.high {
		h, err := in.reader.read(addr, l.nmSize)
		if err != nil {
			return nil, err
		}
		return blobIdentity(h, l), nil
	}
	cm, err := in.reader.constMethodOf(addr)
	if err != nil {
		return nil, err
	}
	return binary.LittleEndian.AppendUint64(nil, cm), nil
}

// blobIdentity is what tells two code blobs at one address apart: their
// name, and a compiled method's compile id and method.
func blobIdentity(h []byte, l *layout) []byte {
	id := binary.LittleEndian.AppendUint64(nil, u64(h, l.blobName))
	id = binary.LittleEndian.AppendUint32(id, u32(h, l.nmCompileID))
	return binary.LittleEndian.AppendUint64(id, u64(h, l.nmMethod))
}

// blob reads the code blob at addr: a compiled method, or a stub.
func (in *instance) blob(addr uint64, check uint16) (*interp.Object, error) {
	l := in.reader.l
	h, err := in.reader.read(addr, l.nmSize)
	if err != nil {
		return nil, fmt.Errorf("reading code blob: %w", err)
	}
	name, err := in.cString(u64(h, l.blobName), maxBlobName)
	if err != nil {
		return nil, fmt.Errorf("reading code blob's name: %w", err)
	}
	id := blobIdentity(h, l)
	if name == nmethodName || name == nativeNMethodName {
		n, err := in.reader.nmethod(addr, check, name == nativeNMethodName, in.methodOrNil)
		if err != nil {
			return nil, err
		}
		return &interp.Object{Name: n.own.name, File: n.own.file, Inlines: n, Identity: id, Bytes: n.bytes()}, nil
	}
	if check != 0 {
		return nil, errStale
	}
	s := &stub{name: name, code: u64(h, l.blobCodeBegin), callStubReturn: in.cache.callStubReturn}
	return &interp.Object{Name: name, Inlines: s, Identity: id, Bytes: int64(unsafe.Sizeof(*s)) + int64(len(name))}, nil
}

// stub names the frames of a stub: by its blob's name, but the call stub
// (in the blob of many StubRoutines) by its own.
type stub struct {
	name           string
	code           uint64
	callStubReturn uint64
}

func (s *stub) Lines(offset uint32) []frame.Line {
	if offset != frame.NoOffset && s.code+uint64(offset)+1 == s.callStubReturn {
		return []frame.Line{{Name: callStub}}
	}
	return []frame.Line{{Name: s.name}}
}

// bytecodeLines gives an interpreted frame's line from its bytecode index.
type bytecodeLines struct{ m *method }

func (b bytecodeLines) Line(bci uint32) int64 { return b.m.line(int32(bci)) }

// method returns the Method at addr, read once per attach; a Method
// freed and another allocated there is read again.
func (in *instance) method(addr uint64) (*method, error) {
	key := remoteKey{attach: in.attach, addr: addr}
	if m, ok := in.client.methods.Get(key); ok {
		if cm, err := in.reader.constMethodOf(addr); err == nil && cm == m.constMethod {
			return m, nil
		}
		in.client.methods.Remove(key)
	}
	m, err := in.reader.method(addr, &symbolCache{in})
	if err != nil {
		return nil, err
	}
	in.client.methods.Add(key, m)
	return m, nil
}

// methodOrNil is method, nil when it cannot be read.
func (in *instance) methodOrNil(addr uint64) *method {
	m, err := in.method(addr)
	if err != nil {
		return nil
	}
	return m
}

// symbolCache reads Symbols through the client's cache: class names and
// descriptors are shared by many methods.
type symbolCache struct{ in *instance }

func (c *symbolCache) get(r *reader, addr uint64) (string, error) {
	key := remoteKey{attach: c.in.attach, addr: addr}
	if s, ok := c.in.client.symbols.Get(key); ok {
		return s, nil
	}
	s, err := r.symbol(addr)
	if err != nil {
		return "", err
	}
	c.in.client.symbols.Add(key, s)
	return s, nil
}

// cString reads the NUL-terminated string at addr, at most max bytes.
func (in *instance) cString(addr uint64, max int) (string, error) {
	var sb strings.Builder
	var chunk [64]byte
	for sb.Len() < max {
		a := addr + uint64(sb.Len())
		n := 64 - a%64
		if err := in.reader.mem.Read(a, chunk[:n]); err != nil {
			return "", err
		}
		for _, c := range chunk[:n] {
			if c == 0 {
				return sb.String(), nil
			}
			if c < 0x20 || c > 0x7e {
				return "", fmt.Errorf("string at %#x: byte %#x is not printable ASCII", addr, c)
			}
			sb.WriteByte(c)
		}
	}
	return "", fmt.Errorf("string at %#x: longer than %d bytes", addr, max)
}
