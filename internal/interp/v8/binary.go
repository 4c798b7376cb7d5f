package v8

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"regexp"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
)

// fileName matches the files V8 is linked into: node (nodejs, node20,
// nsolid) or libnode.so, so that other files are never opened.
var fileName = regexp.MustCompile(`^(?:node|nodejs|nsolid)(?:\d+)?$|^libnode\.so(?:\.\d+)*$`)

// Candidate reports whether a mapped file's path names a file that may
// hold V8.
func Candidate(p string) bool { return fileName.MatchString(path.Base(p)) }

// errNotV8 is returned for a file without V8's post-mortem data.
var errNotV8 = errors.New("not a V8 binary with post-mortem data")

// The symbols read: V8's post-mortem data, its version, its bytecode
// lengths, and where its embedded builtins are.
const (
	v8dbgPrefix   = "v8dbg_"
	versionPrefix = "_ZN2v88internal7Version6"
	blobCode      = "v8_Default_embedded_blob_code_"
	blobCodeSize  = "v8_Default_embedded_blob_code_size_"
)

func wanted(name []byte) bool {
	return bytes.HasPrefix(name, []byte(v8dbgPrefix)) || bytes.HasPrefix(name, []byte(versionPrefix)) ||
		bytes.HasPrefix(name, []byte(blobCode)) || string(name) == bytecodeSizesSymbol
}

// binaryInfo is what a V8 binary tells of every process that runs it.
type binaryInfo struct {
	layout *layout
	// blob is the virtual address range of the embedded builtins, empty
	// when the binary does not say (no symbol table).
	blob Range
	// addrs are the file's segments, to find a mapping's bias.
	addrs *elfbin.AddressMapper
}

// Range is a range [Start, End) of addresses.
type Range struct{ Start, End uint64 }

// Contains reports whether addr is in r.
func (r Range) Contains(addr uint64) bool { return addr >= r.Start && addr < r.End }

// imageSymbols reads v8dbg_* values from an image.
type imageSymbols struct{ img *elfimage.Image }

func (s imageSymbols) value(name string) (int64, bool) {
	sym, ok := s.img.Symbol(v8dbgPrefix + name)
	if !ok {
		return 0, false
	}
	v, err := s.img.Uint32(sym.Value)
	if err != nil {
		return 0, false
	}
	return int64(int32(v)), true
}

// analyze reads img, a file that may hold V8.
func analyze(img *elfimage.Image) (*binaryInfo, error) {
	if _, ok := img.Symbol(v8dbgPrefix + "TaggedSize"); !ok {
		return nil, errNotV8
	}
	v, err := version(img)
	if err != nil {
		return nil, err
	}
	l, err := newLayout(v, imageSymbols{img})
	if err != nil {
		return nil, err
	}
	l.bytecodeSizes = bytecodeSizes(img)
	info := &binaryInfo{layout: l, addrs: img.Addresses()}
	if code, ok := img.Symbol(blobCode); ok {
		if size, ok := img.Symbol(blobCodeSize); ok {
			if n, err := img.Uint32(size.Value); err == nil && n > 0 {
				info.blob = Range{Start: code.Value, End: code.Value + uint64(n)}
			}
		}
	}
	return info, nil
}

// version reads V8's version from v8::internal::Version's fields.
func version(img *elfimage.Image) (Version, error) {
	var parts [3]int
	for i, f := range []string{"major_E", "minor_E", "build_E"} {
		s, ok := img.Symbol(versionPrefix + f)
		if !ok {
			return Version{}, fmt.Errorf("no V8 version: %s%s missing", versionPrefix, f)
		}
		v, err := img.Uint32(s.Value)
		if err != nil {
			return Version{}, fmt.Errorf("reading the V8 version: %w", err)
		}
		if v > 1<<16 {
			return Version{}, fmt.Errorf("V8 version part %d: out of range", v)
		}
		parts[i] = int(v)
	}
	return Version{parts[0], parts[1], parts[2]}, nil
}

// bytecodeSizes reads kBytecodeSizes[3][n], nil when the binary lacks it
// or it does not look like one.
func bytecodeSizes(img *elfimage.Image) [3][]byte {
	var out [3][]byte
	s, ok := img.Symbol(bytecodeSizesSymbol)
	if !ok || s.Size == 0 || s.Size%3 != 0 || s.Size > 3*256 {
		return out
	}
	all := make([]byte, s.Size)
	if err := img.Read(s.Value, all); err != nil {
		return out
	}
	for _, n := range all {
		// No bytecode is empty or longer than a prefix and 5 operands
		// of 4 bytes.
		if n == 0 || n > 32 {
			return out
		}
	}
	n := len(all) / 3
	for i := range out {
		out[i] = all[i*n : (i+1)*n]
	}
	return out
}

// loadBias is the difference between the runtime and virtual addresses
// of the file mapped at start from offset off.
func (b *binaryInfo) loadBias(start, off uint64) (uint64, bool) {
	return b.addrs.LoadBias(start, off)
}

func le32(b []byte, off uint64) uint32 {
	if off+4 > uint64(len(b)) {
		return 0
	}
	return binary.LittleEndian.Uint32(b[off:])
}

func le64(b []byte, off uint64) uint64 {
	if off+8 > uint64(len(b)) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[off:])
}
