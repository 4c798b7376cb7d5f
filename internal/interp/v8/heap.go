package v8

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Bounds on what is read of a process: whatever its memory says, naming a
// frame allocates at most about this much.
const (
	maxNameLen   = 1 << 10  // a function's name, in characters
	maxFileLen   = 4 << 10  // a script's name, in characters
	maxSource    = 64 << 20 // a script's source, read for its line ends
	maxStrDepth  = 16       // nested cons, thin and sliced strings
	maxStrPieces = 1 << 10  // strings one string is made of, nested ones included
	maxTableLen  = 1 << 20  // a position table, in bytes
	maxLineEnds  = 1 << 22  // a script's lines
	maxInlined   = 1 << 12  // functions inlined into one code object
	maxCodeBytes = 8 << 20  // instructions of one code object
	readChunk    = 64 << 10 // a long read is made in pieces of this size
)

// remote reads a process's memory.
type remote interface {
	Read(addr uint64, buf []byte) error
}

// heap reads V8's objects in one process's memory.
type heap struct {
	l   *layout
	mem remote
}

var (
	// errEnough stops a walk of a string's characters early.
	errEnough        = errors.New("enough characters")
	errNotHeapObject = errors.New("not a heap object")
	errWrongType     = errors.New("an object of another type")
)

// isHeapObject reports whether v is a tagged heap object pointer.
func isHeapObject(v uint64) bool { return v&3 == 1 && v <= maxUserAddr }

// isWeakOrStrong reports whether v is a heap object pointer, strong or
// weak (tagged 11), and returns its strong form.
func strongRef(v uint64) (uint64, bool) {
	if v&3 == 3 {
		v &^= 2
	}
	return v, isHeapObject(v)
}

func isSmi(v uint64) bool { return v&1 == 0 }

// smi is a Smi's value (64-bit Smis: the upper half).
func smi(v uint64) int32 { return int32(v >> 32) }

const maxUserAddr = 0x00007fffffffffff

// read reads len(buf) bytes at off from the object obj (tagged).
func (h *heap) read(obj, off uint64, buf []byte) error {
	if !isHeapObject(obj) {
		return fmt.Errorf("reading %#x: %w", obj, errNotHeapObject)
	}
	return h.mem.Read(obj-1+off, buf)
}

// word reads the 8 bytes at off of obj.
func (h *heap) word(obj, off uint64) (uint64, error) {
	var b [8]byte
	if err := h.read(obj, off, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// typeOf reads the instance type of obj, from its map.
func (h *heap) typeOf(obj uint64) (uint16, error) {
	m, err := h.word(obj, h.l.heapMap)
	if err != nil {
		return 0, err
	}
	if !isHeapObject(m) {
		return 0, fmt.Errorf("the map of %#x: %w", obj, errNotHeapObject)
	}
	var b [2]byte
	if err := h.read(m, h.l.mapInstanceType, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b[:]), nil
}

// expect checks that obj is a heap object of type t.
func (h *heap) expect(obj uint64, t uint16) error {
	got, err := h.typeOf(obj)
	if err != nil {
		return err
	}
	if got != t {
		return fmt.Errorf("%#x has type %d, want %d: %w", obj, got, t, errWrongType)
	}
	return nil
}

// length reads a FixedArrayBase's (or a String's) length.
func (h *heap) length(obj uint64) (uint64, error) {
	w, err := h.word(obj, h.l.fixedLength)
	if err != nil {
		return 0, err
	}
	if !isSmi(w) || smi(w) < 0 {
		return 0, fmt.Errorf("the length of %#x: not a length", obj)
	}
	return uint64(smi(w)), nil
}

// byteArray reads the bytes of the ByteArray (or a type laid out like
// one) obj of type t, at most max.
func (h *heap) byteArray(obj uint64, t uint16, max uint64) ([]byte, error) {
	if err := h.expect(obj, t); err != nil {
		return nil, err
	}
	n, err := h.length(obj)
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, fmt.Errorf("a byte array of %d bytes, more than %d", n, max)
	}
	return h.readLong(obj-1+h.l.fixedData, n)
}

// fixedArray reads the first n (at most) elements of the FixedArray (or
// WeakFixedArray) obj of type t.
func (h *heap) fixedArray(obj uint64, t uint16, n uint64) ([]uint64, error) {
	if err := h.expect(obj, t); err != nil {
		return nil, err
	}
	have, err := h.length(obj)
	if err != nil {
		return nil, err
	}
	n = min(n, have)
	raw, err := h.readLong(obj-1+h.l.fixedData, n*8)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(raw[8*i:])
	}
	return out, nil
}

// readLong reads n bytes at addr in pieces, growing its buffer as the
// pieces come: a length a process's memory claims costs no more than the
// memory it really has there.
func (h *heap) readLong(addr, n uint64) ([]byte, error) {
	out := make([]byte, 0, min(n, readChunk))
	for off := uint64(0); off < n; off += readChunk {
		piece := min(readChunk, n-off)
		out = append(out, make([]byte, piece)...)
		if err := h.mem.Read(addr+off, out[off:off+piece]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// str reads the String obj, at most max characters, as UTF-8.
func (h *heap) str(obj uint64, max int) (string, error) {
	var b strings.Builder
	if err := h.chars(obj, max, maxStrDepth, new(int), func(one []byte, two []uint16) error {
		if one != nil {
			for _, c := range one {
				b.WriteRune(rune(c))
			}
			return nil
		}
		for _, r := range utf16.Decode(two) {
			b.WriteRune(r)
		}
		return nil
	}); err != nil {
		return "", err
	}
	s := b.String()
	if !utf8.ValidString(s) {
		return strings.ToValidUTF8(s, "\uFFFD"), nil
	}
	return s, nil
}

// chars hands the characters of the String obj to out, in pieces: one-
// byte pieces (Latin-1) or two-byte ones (UTF-16). It fails beyond max
// characters, depth nested strings, or maxStrPieces strings in all
// (*pieces counts them): a tree of cons strings sharing their halves is
// as deep as it is wide.
func (h *heap) chars(obj uint64, max int, depth int, pieces *int, out func(one []byte, two []uint16) error) error {
	if depth <= 0 {
		return errors.New("strings nested too deep")
	}
	if *pieces++; *pieces > maxStrPieces {
		return fmt.Errorf("a string made of more than %d strings", maxStrPieces)
	}
	t, err := h.typeOf(obj)
	if err != nil {
		return err
	}
	if t >= h.l.firstNonString {
		return fmt.Errorf("%#x: type %d, not a string: %w", obj, t, errWrongType)
	}
	var hdr [16]byte
	if err := h.read(obj, 0, hdr[:]); err != nil {
		return err
	}
	n := int(int32(le32(hdr[:], h.l.strLength)))
	if n < 0 || n > max {
		return fmt.Errorf("a string of %d characters, more than %d", n, max)
	}
	one := t&h.l.strEncodingMask == h.l.strOneByte
	switch t & h.l.strReprMask {
	case h.l.strSeq:
		return h.flat(obj-1+h.l.seqChars, n, one, out)
	case h.l.strExternal:
		data, err := h.word(obj, h.l.externalData)
		if err != nil {
			return err
		}
		if data == 0 || data > maxUserAddr {
			return errors.New("an external string without its characters' address")
		}
		return h.flat(data, n, one, out)
	case h.l.strCons:
		first, err := h.word(obj, h.l.consFirst)
		if err != nil {
			return err
		}
		second, err := h.word(obj, h.l.consSecond)
		if err != nil {
			return err
		}
		counted := 0
		count := func(one []byte, two []uint16) error {
			counted += len(one) + len(two)
			if counted > n {
				return errors.New("a cons string longer than its length")
			}
			return out(one, two)
		}
		if err := h.chars(first, n, depth-1, pieces, count); err != nil {
			return err
		}
		return h.chars(second, n-counted, depth-1, pieces, count)
	case h.l.strThin:
		actual, err := h.word(obj, h.l.thinActual)
		if err != nil {
			return err
		}
		return h.chars(actual, max, depth-1, pieces, out)
	case h.l.strSliced:
		parent, err := h.word(obj, h.l.slicedParent)
		if err != nil {
			return err
		}
		off, err := h.word(obj, h.l.slicedOffset)
		if err != nil {
			return err
		}
		if !isSmi(off) || smi(off) < 0 {
			return errors.New("a sliced string without an offset")
		}
		skip, taken := int(smi(off)), 0
		err = h.chars(parent, maxSource, depth-1, pieces, func(o []byte, w []uint16) error {
			if taken == n {
				return errEnough
			}
			if o != nil {
				d := min(skip, len(o))
				o, skip = o[d:], skip-d
				o = o[:min(len(o), n-taken)]
				taken += len(o)
				if len(o) == 0 {
					return nil
				}
				return out(o, nil)
			}
			d := min(skip, len(w))
			w, skip = w[d:], skip-d
			w = w[:min(len(w), n-taken)]
			taken += len(w)
			if len(w) == 0 {
				return nil
			}
			return out(nil, w)
		})
		if errors.Is(err, errEnough) {
			err = nil
		}
		return err
	default:
		return fmt.Errorf("a string of representation %d", t&h.l.strReprMask)
	}
}

// flat hands n characters at addr to out, in pieces of at most readChunk
// bytes.
func (h *heap) flat(addr uint64, n int, one bool, out func(one []byte, two []uint16) error) error {
	size := uint64(n)
	if !one {
		size *= 2
	}
	buf := make([]byte, min(size, readChunk))
	for off := uint64(0); off < size; off += readChunk {
		piece := buf[:min(readChunk, size-off)]
		if err := h.mem.Read(addr+off, piece); err != nil {
			return err
		}
		var err error
		if one {
			err = out(piece, nil)
		} else {
			w := make([]uint16, len(piece)/2)
			for i := range w {
				w[i] = binary.LittleEndian.Uint16(piece[2*i:])
			}
			err = out(nil, w)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
