package elfbin

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zlib"
)

// SectionReader returns a reader of s's content, decompressed. raw is s's
// bytes in f, nil when not at hand. A zlib section (ELFCOMPRESS_ZLIB:
// libc6-dbg's, Go's DWARF) whose bytes are at hand is inflated by
// klauspost/compress, which takes a quarter less CPU than compress/flate
// (libc6-dbg's libc: 42 ms against 55): a first start decompresses
// libc's DWARF to name its frames. Other sections are read through
// debug/elf.
func SectionReader(f *elf.File, s *elf.Section, raw []byte) io.Reader {
	if s.Flags&elf.SHF_COMPRESSED == 0 || raw == nil {
		return s.Open()
	}
	typ, body, err := CompressionHeader(f, raw)
	if err != nil {
		return errReader{fmt.Errorf("reading %s: %w", s.Name, err)}
	}
	if typ != elf.COMPRESS_ZLIB {
		return s.Open()
	}
	zr, err := zlib.NewReader(bytes.NewReader(body))
	if err != nil {
		return errReader{fmt.Errorf("decompressing %s: %w", s.Name, err)}
	}
	return zr
}

// CompressionHeader returns the compression type of a SHF_COMPRESSED
// section's bytes, raw, and the compressed stream after the header.
func CompressionHeader(f *elf.File, raw []byte) (elf.CompressionType, []byte, error) {
	switch f.Class {
	case elf.ELFCLASS64:
		// Elf64_Chdr: type, reserved, size, alignment.
		if len(raw) < 24 {
			return 0, nil, errors.New("compression header cut short")
		}
		return elf.CompressionType(f.ByteOrder.Uint32(raw)), raw[24:], nil
	case elf.ELFCLASS32:
		// Elf32_Chdr: type, size, alignment.
		if len(raw) < 12 {
			return 0, nil, errors.New("compression header cut short")
		}
		return elf.CompressionType(f.ByteOrder.Uint32(raw)), raw[12:], nil
	}
	return 0, nil, fmt.Errorf("unknown ELF class %v", f.Class)
}

// SectionData returns s's content, decompressed, in the heap, as
// (*elf.Section).Data does.
func SectionData(f *elf.File, s *elf.Section, raw []byte) ([]byte, error) {
	if s.Flags&elf.SHF_COMPRESSED == 0 || raw == nil {
		return s.Data()
	}
	r := SectionReader(f, s, raw)
	var b []byte
	var err error
	if s.Size <= maxSectionPrealloc {
		b = make([]byte, s.Size)
		var n int
		n, err = io.ReadFull(r, b)
		b = b[:n]
	} else {
		// A header may claim any size: the heap grows with what the
		// stream holds instead.
		b, err = io.ReadAll(io.LimitReader(r, int64(min(s.Size, 1<<62))))
		if err == nil && uint64(len(b)) < s.Size {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		return b, fmt.Errorf("decompressing %s: %w", s.Name, err)
	}
	// Read on to the end of the stream, where its checksum is checked.
	if err := AtEOF(r); err != nil {
		return b, fmt.Errorf("decompressing %s: %w", s.Name, err)
	}
	return b, nil
}

// AtEOF reads on from r, which must be at its end: a stream checks its
// checksum there.
func AtEOF(r io.Reader) error {
	var one [1]byte
	for range 100 {
		n, err := r.Read(one[:])
		switch {
		case n > 0:
			return errors.New("longer than its header says")
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
	return io.ErrNoProgress
}

// maxSectionPrealloc is the largest decompressed size allocated before
// the stream is read.
const maxSectionPrealloc = 16 << 20

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
