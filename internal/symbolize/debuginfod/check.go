package debuginfod

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/bpfcol/bpfcol/internal/elfbin"
)

// ErrInvalid means a server sent something other than the requested debug
// file: not ELF, a malformed ELF, or another build-id. It is a parse
// failure, not a network one.
var ErrInvalid = errors.New("download is not the requested debug file")

// Bounds on what a download's headers may ask the check to read.
const (
	maxPhdrTable = 1 << 20
	maxShdrTable = 64 << 20
	maxNoteBytes = 1 << 20
	// maxSections bounds the extended section count (e_shnum 0).
	maxSections = 1 << 20
)

// StreamCheck validates a download as its bytes arrive, so that a body
// that is not the requested debug file is rejected as soon as that can be
// known: at the first byte that is not the ELF magic, at a header that is
// not ELF, at the program or section headers once they are in, and at the
// GNU build-id note once its bytes are in. It reads back the bytes already
// received through an io.ReaderAt (the temporary file).
type StreamCheck struct {
	want  []byte
	r     io.ReaderAt
	limit int64 // no offset of interest may reach beyond it; <= 0: none
	n     int64 // bytes received so far

	hdr     bool
	order   binary.ByteOrder
	is64    bool
	phoff   int64
	phsize  int64 // bytes of the program header table, 0 if none
	shoff   int64
	shsize  int64 // bytes of the section header table, 0 if none; -1 until known
	phDone  bool
	shDone  bool
	notes   []region // note regions not yet read
	found   bool
	checked int // note regions read
	// tooLarge is set when the section headers lie beyond the limit. It
	// is reported once the program headers' notes are read, so that a
	// wrong build-id is reported as such.
	tooLarge error
}

type region struct{ off, size, align int64 }

var elfMagic = []byte("\x7fELF")

// NewStreamCheck returns a check for the debug file of buildID (valid hex),
// reading received bytes back through r. limit bounds the file's size; <= 0
// means none.
func NewStreamCheck(buildID string, r io.ReaderAt, limit int64) (*StreamCheck, error) {
	want, err := hex.DecodeString(buildID)
	if err != nil {
		return nil, fmt.Errorf("checking a download for %q: %w", buildID, ErrInvalidBuildID)
	}
	return &StreamCheck{want: want, r: r, limit: limit, shsize: -1}, nil
}

// BuildIDSeen reports whether the build-id note has been found and matched.
func (c *StreamCheck) BuildIDSeen() bool { return c.found }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func (c *StreamCheck) read(off, size int64) ([]byte, error) {
	b := make([]byte, size)
	if _, err := c.r.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("reading back the download at %d: %w", off, err)
	}
	return b, nil
}

func (c *StreamCheck) within(off, size int64) bool {
	return off >= 0 && size >= 0 && off <= (1<<62) && size <= (1<<62) && (c.limit <= 0 || off+size <= c.limit)
}

// bounds explains why a table of size bytes at off is refused: beyond the
// size limit, the file is too large (ErrTooLarge); otherwise it is
// malformed (ErrInvalid).
func (c *StreamCheck) bounds(what string, off, size int64) error {
	if off >= 0 && size >= 0 && off <= (1<<62) && size <= (1<<62) {
		return fmt.Errorf("%s of %d bytes at %d ends beyond %d bytes: %w", what, size, off, c.limit, ErrTooLarge)
	}
	return invalid("%s of %d bytes at %d", what, size, off)
}

// Advance tells the check that the first n bytes have been received and
// returns an error wrapping ErrInvalid as soon as they prove the download
// wrong.
func (c *StreamCheck) Advance(n int64) error {
	c.n = n
	if c.found {
		return c.tooLarge
	}
	if !c.hdr {
		if err := c.header(); err != nil || !c.hdr {
			return err
		}
	}
	if !c.phDone && c.n >= c.phoff+c.phsize {
		if err := c.programHeaders(); err != nil {
			return err
		}
	}
	if !c.shDone {
		if err := c.sectionHeaders(); err != nil {
			return err
		}
	}
	if err := c.readNotes(); err != nil {
		return err
	}
	if c.found || (c.tooLarge != nil && c.phDone && len(c.notes) == 0) {
		return c.tooLarge
	}
	if c.phDone && c.shDone && len(c.notes) == 0 {
		return invalid("no GNU build-id note in %d note regions", c.checked)
	}
	return nil
}

// Finish checks a download that ended after n bytes.
func (c *StreamCheck) Finish(n int64) error {
	if err := c.Advance(n); err != nil {
		return err
	}
	switch {
	case c.found:
		return nil
	case !c.hdr:
		return invalid("%d bytes, shorter than an ELF header", n)
	}
	return invalid("ended after %d bytes without the GNU build-id note", n)
}

func (c *StreamCheck) header() error {
	have := min(c.n, 64)
	if have == 0 {
		return nil
	}
	b, err := c.read(0, have)
	if err != nil {
		return err
	}
	if m := min(len(b), 4); !bytes.Equal(b[:m], elfMagic[:m]) {
		return invalid("does not start with the ELF magic")
	}
	if len(b) < 16 {
		return nil
	}
	switch b[4] {
	case 1:
	case 2:
		c.is64 = true
	default:
		return invalid("ELF class %d", b[4])
	}
	switch b[5] {
	case 1:
		c.order = binary.LittleEndian
	case 2:
		c.order = binary.BigEndian
	default:
		return invalid("ELF data encoding %d", b[5])
	}
	if b[6] != 1 {
		return invalid("ELF version %d", b[6])
	}
	ehsize := int64(52)
	if c.is64 {
		ehsize = 64
	}
	if int64(len(b)) < ehsize {
		return nil
	}
	o := c.order
	var phentsize, phnum, shentsize, shnum int64
	var phoff, shoff uint64
	if c.is64 {
		phoff, shoff = o.Uint64(b[32:]), o.Uint64(b[40:])
		phentsize, phnum = int64(o.Uint16(b[54:])), int64(o.Uint16(b[56:]))
		shentsize, shnum = int64(o.Uint16(b[58:])), int64(o.Uint16(b[60:]))
	} else {
		phoff, shoff = uint64(o.Uint32(b[28:])), uint64(o.Uint32(b[32:]))
		phentsize, phnum = int64(o.Uint16(b[42:])), int64(o.Uint16(b[44:]))
		shentsize, shnum = int64(o.Uint16(b[46:])), int64(o.Uint16(b[48:]))
	}
	wantPh, wantSh := int64(32), int64(40)
	if c.is64 {
		wantPh, wantSh = 56, 64
	}
	if phoff > 1<<62 || shoff > 1<<62 {
		return invalid("header table offset out of range")
	}
	c.phoff, c.shoff = int64(phoff), int64(shoff)
	if phnum > 0 {
		if phentsize != wantPh || c.phoff < ehsize {
			return invalid("program header table at %d of %d-byte entries", c.phoff, phentsize)
		}
		c.phsize = phnum * phentsize
		if c.phsize > maxPhdrTable {
			return invalid("program header table of %d bytes", c.phsize)
		}
		if !c.within(c.phoff, c.phsize) {
			return c.bounds("program header table", c.phoff, c.phsize)
		}
	} else {
		c.phoff = 0
		c.phDone = true
	}
	switch {
	case c.shoff == 0:
		c.shsize = 0
		c.shDone = true
	case shentsize != wantSh || c.shoff < ehsize:
		return invalid("section header table at %d of %d-byte entries", c.shoff, shentsize)
	case shnum > 0:
		c.shsize = shnum * shentsize
	}
	// shnum 0 with a table: the count is in section 0 (extended numbering).
	if c.shsize > maxShdrTable {
		return invalid("section header table of %d bytes", c.shsize)
	}
	if !c.within(c.shoff, max(c.shsize, wantSh)) {
		err := c.bounds("section header table", c.shoff, max(c.shsize, wantSh))
		if !errors.Is(err, ErrTooLarge) || c.phDone {
			return err
		}
		c.tooLarge, c.shDone = err, true
	}
	if c.phDone && c.shDone {
		return invalid("no program or section headers")
	}
	c.hdr = true
	return nil
}

func (c *StreamCheck) programHeaders() error {
	c.phDone = true
	b, err := c.read(c.phoff, c.phsize)
	if err != nil {
		return err
	}
	o := c.order
	ent := int64(32)
	if c.is64 {
		ent = 56
	}
	for i := int64(0); i+ent <= int64(len(b)); i += ent {
		p := b[i : i+ent]
		if o.Uint32(p) != 4 { // PT_NOTE
			continue
		}
		var off, size, align uint64
		if c.is64 {
			off, size, align = o.Uint64(p[8:]), o.Uint64(p[32:]), o.Uint64(p[48:])
		} else {
			off, size, align = uint64(o.Uint32(p[4:])), uint64(o.Uint32(p[16:])), uint64(o.Uint32(p[28:]))
		}
		c.addNotes(off, size, align)
	}
	return nil
}

func (c *StreamCheck) sectionHeaders() error {
	ent := int64(40)
	if c.is64 {
		ent = 64
	}
	if c.shsize < 0 {
		// Extended numbering: section 0's sh_size is the count.
		if c.n < c.shoff+ent {
			return nil
		}
		b, err := c.read(c.shoff, ent)
		if err != nil {
			return err
		}
		count := uint64(c.order.Uint32(b[20:]))
		if c.is64 {
			count = c.order.Uint64(b[32:])
		}
		if count == 0 || count > maxSections || int64(count)*ent > maxShdrTable {
			return invalid("extended section count %d", count)
		}
		if !c.within(c.shoff, int64(count)*ent) {
			return c.bounds("section header table", c.shoff, int64(count)*ent)
		}
		c.shsize = int64(count) * ent
	}
	if c.n < c.shoff+c.shsize {
		return nil
	}
	c.shDone = true
	b, err := c.read(c.shoff, c.shsize)
	if err != nil {
		return err
	}
	o := c.order
	for i := int64(0); i+ent <= int64(len(b)); i += ent {
		s := b[i : i+ent]
		if o.Uint32(s[4:]) != 7 { // SHT_NOTE
			continue
		}
		var off, size, align uint64
		if c.is64 {
			off, size, align = o.Uint64(s[24:]), o.Uint64(s[32:]), o.Uint64(s[48:])
		} else {
			off, size, align = uint64(o.Uint32(s[16:])), uint64(o.Uint32(s[20:])), uint64(o.Uint32(s[32:]))
		}
		c.addNotes(off, size, align)
	}
	return nil
}

// addNotes queues a note region; empty, huge or out-of-bounds ones cannot
// hold a build-id worth reading and are skipped.
func (c *StreamCheck) addNotes(off, size, align uint64) {
	if size == 0 || size > maxNoteBytes || off > 1<<62 || !c.within(int64(off), int64(size)) {
		return
	}
	a := int64(4)
	if align == 8 {
		a = 8
	}
	c.notes = append(c.notes, region{int64(off), int64(size), a})
}

// readNotes reads every queued note region whose bytes are in.
func (c *StreamCheck) readNotes() error {
	kept := c.notes[:0]
	for _, r := range c.notes {
		if c.found || c.n < r.off+r.size {
			kept = append(kept, r)
			continue
		}
		c.checked++
		b, err := c.read(r.off, r.size)
		if err != nil {
			return err
		}
		if err := c.scanNotes(b, r.align); err != nil {
			return err
		}
	}
	c.notes = kept
	if c.found {
		c.notes = nil
	}
	return nil
}

// scanNotes looks for the NT_GNU_BUILD_ID note in b, notes aligned to
// align, and checks it is the one asked for.
func (c *StreamCheck) scanNotes(b []byte, align int64) error {
	id := elfbin.NoteBuildIDs(b, uint64(align), c.order).GNU
	if id == "" {
		return nil
	}
	if id != hex.EncodeToString(c.want) {
		return invalid("build-id is %s, want %x", id, c.want)
	}
	c.found = true
	return nil
}
