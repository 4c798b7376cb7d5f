package symbolize

import (
	"crypto/sha256"
	"debug/elf"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/bpfcol/bpfcol/internal/elfbin"
)

// prefixSection is a compressed section decompressed to disk only as far
// as reads need: a first start names a process's libc frames from the
// units at the front of libc6-dbg's .debug_info without decompressing the
// rest (the whole costs ~45 ms of CPU). Its file is sized and mapped whole
// up front, and ensure decompresses on to a given length; bytes past that
// are not to be read. Once decompressed whole, the file is kept for later
// runs like a section decompressed at once.
type prefixSection struct {
	sp   *sectionSpill
	name string
	size int64
	key  [sha256.Size]byte
	m    []byte // the file mapped, header included
	// done is the content decompressed so far, stored after it is
	// written.
	done atomic.Int64

	mu      sync.Mutex
	f       *os.File // nil once whole, failed or released
	rel     string
	zr      io.Reader
	crc     hash.Hash32
	err     error
	removed bool
	release sync.Once
}

// prefixStep rounds up what ensure decompresses: units next to each
// other then need one decompression.
const prefixStep = 64 << 10

// prefix returns s decompressed to disk as far as reads need, the room
// for its whole reserved. ok is false when s cannot be read so (not zlib,
// no room, its compressed bytes not at hand) or is kept whole from an
// earlier run, which maps it at no cost: the caller reads it whole.
func (sp *sectionSpill) prefix(elfFile *elf.File, s *elf.Section, raw []byte) (_ *prefixSection, ok bool, err error) {
	if s.Flags&elf.SHF_COMPRESSED == 0 || raw == nil || s.Size == 0 || s.Size > elfbin.MaxMappedFile-keptHeaderSize {
		return nil, false, nil
	}
	if typ, _, err := elfbin.CompressionHeader(elfFile, raw); err != nil || typ != elf.COMPRESS_ZLIB {
		return nil, false, nil
	}
	// What reads the mapped file, which a truncation under us turns into
	// a fault (a panic here), comes before reserving room.
	key := keptKey(s.Name, raw)
	if sp.isKept(key) {
		return nil, false, nil
	}
	zr := elfbin.SectionReader(elfFile, s, raw)
	size := int64(s.Size)
	if sp.used.Add(size) > sp.max {
		sp.used.Add(-size)
		sp.refused.Add(1)
		return nil, false, nil
	}
	f, rel, err := sp.dir.CreateTemp(keptSubdir, spillPrefix)
	if err != nil {
		sp.used.Add(-size)
		return nil, false, fmt.Errorf("spilling %s: %w", s.Name, err)
	}
	p := &prefixSection{sp: sp, name: s.Name, size: size, key: key, f: f, rel: rel, crc: crc32.New(castagnoli)}
	fail := func(err error) (*prefixSection, bool, error) {
		p.closeFile()
		sp.used.Add(-size)
		return nil, false, fmt.Errorf("spilling %s: %w", s.Name, err)
	}
	if err := f.Truncate(keptHeaderSize + size); err != nil {
		return fail(err)
	}
	if _, err := f.Seek(keptHeaderSize, io.SeekStart); err != nil {
		return fail(err)
	}
	if p.m, err = elfbin.MapShared(f, keptHeaderSize+size); err != nil {
		return fail(err)
	}
	p.zr = zr
	sp.sections.Add(1)
	return p, true, nil
}

// isKept reports whether a section of key is kept on disk.
func (sp *sectionSpill) isKept(key [sha256.Size]byte) bool {
	sp.keptMu.Lock()
	defer sp.keptMu.Unlock()
	_, ok := sp.kept[keptName(key)]
	return ok
}

// Data returns the section's content, of which only the first Length(),
// as far as Ensure went, may be read.
func (p *prefixSection) Data() []byte { return p.m[keptHeaderSize:] }

// Length is how far the content is decompressed.
func (p *prefixSection) Length() int64 { return p.done.Load() }

// Size is the section's decompressed size.
func (p *prefixSection) Size() int64 { return p.size }

// Ensure decompresses the content up to n bytes (at most the whole).
func (p *prefixSection) Ensure(n int64) (err error) {
	n = min(n, p.size)
	if p.done.Load() >= n {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		// The compressed bytes are the mapped file, which a truncation
		// under us turns into a fault: the section fails for good.
		if r := recover(); r != nil {
			p.err = elfbin.Recovered(r, "decompressing "+p.name)
			p.closeFile()
			err = p.err
		}
	}()
	if p.err != nil {
		return p.err
	}
	done := p.done.Load()
	if done >= n {
		return nil
	}
	if p.f == nil {
		return fmt.Errorf("decompressing %s: %w", p.name, os.ErrClosed)
	}
	want := min(p.size, (n+prefixStep-1)/prefixStep*prefixStep)
	k, err := io.CopyN(io.MultiWriter(p.f, p.crc), p.zr, want-done)
	if err == io.EOF {
		err = fmt.Errorf("decompressed to %d bytes, header says %d: %w", done+k, p.size, io.ErrUnexpectedEOF)
	}
	p.sp.inflated.Add(k)
	p.done.Store(done + k)
	if err == nil && done+k == p.size {
		err = p.finishLocked()
	}
	if err != nil {
		p.err = fmt.Errorf("decompressing %s: %w", p.name, err)
		p.closeFile()
	}
	return p.err
}

// finishLocked checks the stream ends with the content, and keeps the
// file, whole, for later runs.
func (p *prefixSection) finishLocked() error {
	// Read on to the end of the stream, where its checksum is checked.
	if err := elfbin.AtEOF(p.zr); err != nil {
		return err
	}
	if _, err := p.f.WriteAt(keptHeader(p.key, p.size, p.crc.Sum32()), 0); err != nil {
		return err
	}
	if p.sp.keep(p.rel, p.key, keptHeaderSize+p.size) {
		p.removed = true // renamed: the kept file is the bound's now
	}
	p.closeFile()
	return nil
}

// whole decompresses the rest and returns the content.
func (p *prefixSection) whole() ([]byte, error) {
	if err := p.Ensure(p.size); err != nil {
		return nil, err
	}
	return p.Data(), nil
}

// closeFile closes the file, removing it unless kept; the mapping stays.
func (p *prefixSection) closeFile() {
	if p.f == nil {
		return
	}
	if !p.removed {
		p.removed = true
		_ = p.sp.dir.Remove(p.rel)
	}
	_ = p.f.Close()
	p.f, p.zr = nil, nil
}

// close unmaps the section and gives back its room; nothing read from it
// may be used after.
func (p *prefixSection) close() {
	p.release.Do(func() {
		p.mu.Lock()
		p.closeFile()
		if p.err == nil {
			p.err = errors.New("section closed")
		}
		p.mu.Unlock()
		elfbin.Unmap(p.m)
		p.sp.used.Add(-p.size)
	})
}
