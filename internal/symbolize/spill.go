package symbolize

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/safefs"
	"github.com/bpfcol/bpfcol/internal/symbolize/dwarfsym"
)

// sectionSpill decompresses compressed debug sections (libc6-dbg's, Go's
// zlib DWARF) into unlinked files of a private directory and maps them
// read-only, instead of holding them in the Go heap: the page cache keeps
// them, and the process's RSS holds only the pages a lookup touched. The
// files' summed size is bounded; a section beyond the bound is
// decompressed into the heap, and counted.
//
// A section whose compressed bytes are known is also kept, decompressed,
// under keptSubdir, named by a hash of them, so that a restart on the same
// host maps it again instead of decompressing it (libc6-dbg's libc costs
// ~50 ms of CPU to decompress). The kept files are bounded by the same
// size, oldest first out, and each is checked against its header and the
// checksum of its content before it is used.
type sectionSpill struct {
	dir      *safefs.Dir
	max      int64
	used     atomic.Int64
	sections atomic.Uint64 // sections spilled
	refused  atomic.Uint64 // sections decompressed into the heap: no room
	reused   atomic.Uint64 // sections mapped from a kept file
	// inflated is the bytes decompressed to disk, whole sections' and
	// the prefixes of those decompressed as far as lookups read.
	inflated atomic.Int64

	keptMu    sync.Mutex
	kept      map[string]keptFile // by file name
	keptBytes int64

	users int // Symbolizers holding the spill; guarded by openSpills.mu
}

// keptFile is one decompressed section kept on disk.
type keptFile struct {
	size  int64
	mtime int64 // last written or used, Unix nanoseconds
}

// keptSubdir is the directory under the debug cache that holds the
// decompressed sections kept across restarts.
const keptSubdir = "inflated"

// keptSuffix ends a kept section's file name.
const keptSuffix = ".section"

// keptHeaderSize is where a spilled section's content starts in its file,
// after the header: a page, so the content is mapped page-aligned.
const keptHeaderSize = 4096

// keptMagic starts a spilled section's header, which goes on with the
// sha256 of the compressed section and its name (its key), the content's
// size and its CRC-32C.
const keptMagic = "bpfcol-section1\x00"

// keptHeaderLen is the bytes of the header that are used.
const keptHeaderLen = len(keptMagic) + sha256.Size + 8 + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// spillSubdir is the directory under the debug cache that holds the
// spilled sections while they are mapped (they are unlinked at once).
const spillSubdir = "sections"

// spillPrefix names a spilled section's file in the short time between
// its creation and its unlinking.
const spillPrefix = ".section-"

// DefaultMaxSpillBytes bounds the disk the decompressed debug sections of
// the open binaries take.
const DefaultMaxSpillBytes = 1 << 30

// openSpills are the section spills open, by directory: one per
// directory, since a spill removes what it finds of another's there.
var openSpills struct {
	mu    sync.Mutex
	byDir map[string]*sectionSpill
}

// openSectionSpill opens (creating it) the spill directory under
// cacheDir, private to bpfcol, and removes what a crash left there.
func openSectionSpill(cacheDir string, maxBytes int64) (*sectionSpill, error) {
	root, err := safefs.OpenPrivate(cacheDir)
	if err != nil {
		return nil, fmt.Errorf("opening the section spill directory: %w", err)
	}
	if err := root.Mkdir(spillSubdir, 0o700); err != nil {
		root.Close()
		return nil, fmt.Errorf("opening the section spill directory: %w", err)
	}
	names, err := root.ReadDir(spillSubdir)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("opening the section spill directory: %w", err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, spillPrefix) {
			_ = root.Remove(spillSubdir + "/" + n)
		}
	}
	sp := &sectionSpill{dir: root, max: maxBytes, kept: map[string]keptFile{}}
	if err := sp.openKept(); err != nil {
		root.Close()
		return nil, fmt.Errorf("opening the section spill directory: %w", err)
	}
	return sp, nil
}

// openKept lists the kept sections, removes what is not one (a crash's
// temporary file, a link, anything else) and trims them to the bound.
func (sp *sectionSpill) openKept() error {
	if err := sp.dir.Mkdir(keptSubdir, 0o700); err != nil {
		return err
	}
	names, err := sp.dir.ReadDir(keptSubdir)
	if err != nil {
		return err
	}
	for _, n := range names {
		rel := keptSubdir + "/" + n
		info, err := sp.dir.Lstat(rel)
		if err != nil || !info.Mode.IsRegular() || !strings.HasSuffix(n, keptSuffix) || info.Size < keptHeaderSize || info.UID != uint32(os.Geteuid()) {
			_ = sp.dir.Remove(rel)
			continue
		}
		sp.kept[n] = keptFile{size: info.Size, mtime: info.ModTime.UnixNano()}
		sp.keptBytes += info.Size
	}
	sp.keptMu.Lock()
	defer sp.keptMu.Unlock()
	sp.trimKeptLocked(0)
	return nil
}

// trimKeptLocked removes the oldest kept sections until room more bytes
// fit under the bound. A removed file still mapped stays readable until
// unmapped.
func (sp *sectionSpill) trimKeptLocked(room int64) {
	for sp.keptBytes+room > sp.max && len(sp.kept) > 0 {
		var oldest string
		for n, k := range sp.kept {
			if oldest == "" || k.mtime < sp.kept[oldest].mtime {
				oldest = n
			}
		}
		_ = sp.dir.Remove(keptSubdir + "/" + oldest)
		sp.keptBytes -= sp.kept[oldest].size
		delete(sp.kept, oldest)
	}
}

// keptKey names a compressed section by its name and bytes.
func keptKey(name string, raw []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(raw)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// keptName is the file name of the kept section of key.
func keptName(key [sha256.Size]byte) string { return hex.EncodeToString(key[:]) + keptSuffix }

// keptHeader returns the header of a section file.
func keptHeader(key [sha256.Size]byte, size int64, crc uint32) []byte {
	b := make([]byte, 0, keptHeaderLen)
	b = append(b, keptMagic...)
	b = append(b, key[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(size))
	return binary.LittleEndian.AppendUint32(b, crc)
}

// reuse maps the kept section of key if one is there and sound: a
// regular file of ours, of the size, with the header, whose content has
// the checksum the header says. One that is not is removed.
func (sp *sectionSpill) reuse(key [sha256.Size]byte, size int64) (mapping []byte, ok bool) {
	name := keptName(key)
	rel := keptSubdir + "/" + name
	sp.keptMu.Lock()
	_, known := sp.kept[name]
	sp.keptMu.Unlock()
	if !known {
		return nil, false
	}
	f, err := sp.dir.Open(rel)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	bad := func() ([]byte, bool) {
		sp.forgetKept(name)
		_ = sp.dir.Remove(rel)
		return nil, false
	}
	fi, err := f.Stat()
	if uid, regular, oerr := safefs.Owner(f); err != nil || oerr != nil || !regular || uid != uint32(os.Geteuid()) || fi.Size() != keptHeaderSize+size {
		return bad()
	}
	hdr := make([]byte, keptHeaderLen)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return bad()
	}
	crc := binary.LittleEndian.Uint32(hdr[keptHeaderLen-4:])
	if !bytes.Equal(hdr, keptHeader(key, size, crc)) {
		return bad()
	}
	// Read, not mapped, to check it: the pages stay out of the RSS.
	h := crc32.New(castagnoli)
	if n, err := io.Copy(h, io.NewSectionReader(f, keptHeaderSize, size)); err != nil || n != size || h.Sum32() != crc {
		return bad()
	}
	m, err := elfbin.Map(f)
	if err != nil || int64(len(m)) != keptHeaderSize+size {
		elfbin.Unmap(m)
		return bad()
	}
	_ = safefs.Touch(f)
	sp.keptMu.Lock()
	if k, ok := sp.kept[name]; ok {
		k.mtime = time.Now().UnixNano()
		sp.kept[name] = k
	}
	sp.keptMu.Unlock()
	return m, true
}

func (sp *sectionSpill) forgetKept(name string) {
	sp.keptMu.Lock()
	defer sp.keptMu.Unlock()
	if k, ok := sp.kept[name]; ok {
		sp.keptBytes -= k.size
		delete(sp.kept, name)
	}
}

// keep names the written section file rel by key, so a restart finds it;
// false when it cannot be kept (larger than the bound, a rename failed).
func (sp *sectionSpill) keep(rel string, key [sha256.Size]byte, fileSize int64) bool {
	if fileSize > sp.max {
		return false
	}
	name := keptName(key)
	sp.keptMu.Lock()
	defer sp.keptMu.Unlock()
	if k, ok := sp.kept[name]; ok { // replaced below
		sp.keptBytes -= k.size
		delete(sp.kept, name)
	}
	sp.trimKeptLocked(fileSize)
	if err := sp.dir.Rename(rel, keptSubdir+"/"+name); err != nil {
		return false
	}
	sp.kept[name] = keptFile{size: fileSize, mtime: time.Now().UnixNano()}
	sp.keptBytes += fileSize
	return true
}

// SpillStats are the counts of the sections decompressed to disk.
type SpillStats struct {
	// Bytes is the size of the sections spilled and mapped now.
	Bytes int64
	// Sections counts sections spilled; Refused those decompressed into
	// the heap because the bound was reached; Reused those mapped from a
	// file kept by an earlier run (or Binary) instead of decompressed.
	Sections, Refused, Reused uint64
	// KeptBytes is the size of the decompressed sections kept on disk.
	KeptBytes int64
	// Inflated is the bytes decompressed to disk so far: a section read
	// only as far as lookups need (see prefixSection) counts that far.
	Inflated int64
}

// spillStats returns the counts of the section spill of the Binaries
// holding their tables in c.
func (c *Tables) spillStats() SpillStats {
	sp := c.spill.Load()
	if sp == nil {
		return SpillStats{}
	}
	sp.keptMu.Lock()
	kept := sp.keptBytes
	sp.keptMu.Unlock()
	return SpillStats{Bytes: sp.used.Load(), Sections: sp.sections.Load(), Refused: sp.refused.Load(), Reused: sp.reused.Load(), KeptBytes: kept, Inflated: sp.inflated.Load()}
}

// decompress writes the content of the compressed section s of elfFile,
// whose bytes in the file are raw (nil when not at hand), to a new file
// and maps it;
// with raw, the file is kept for later runs, else unlinked at once. A
// section kept earlier is mapped instead. ok is false when s cannot be
// spilled (no room, a .zdebug section whose size is not known up front):
// the caller decompresses into the heap.
func (sp *sectionSpill) decompress(elfFile *elf.File, s *elf.Section, raw []byte) (data []byte, release func(), ok bool, err error) {
	if s.Flags&elf.SHF_COMPRESSED == 0 || s.Size == 0 || s.Size > elfbin.MaxMappedFile-keptHeaderSize {
		return nil, nil, false, nil
	}
	size := int64(s.Size)
	// The key reads the mapped file, which a truncation under us turns
	// into a fault (a panic here): read it before reserving room.
	var key [sha256.Size]byte
	if raw != nil {
		key = keptKey(s.Name, raw)
	}
	if sp.used.Add(size) > sp.max {
		sp.used.Add(-size)
		sp.refused.Add(1)
		return nil, nil, false, nil
	}
	unreserve := func() { sp.used.Add(-size) }
	mapped := func(m []byte) ([]byte, func(), bool, error) {
		sp.sections.Add(1)
		var once sync.Once
		return m[keptHeaderSize:], func() {
			once.Do(func() {
				elfbin.Unmap(m)
				unreserve()
			})
		}, true, nil
	}
	if raw != nil {
		if m, ok := sp.reuse(key, size); ok {
			sp.reused.Add(1)
			return mapped(m)
		}
	}
	sub := spillSubdir
	if raw != nil {
		sub = keptSubdir
	}
	f, rel, err := sp.dir.CreateTemp(sub, spillPrefix)
	if err != nil {
		unreserve()
		return nil, nil, false, fmt.Errorf("spilling %s: %w", s.Name, err)
	}
	defer f.Close()
	removed := false
	remove := func() error {
		if removed {
			return nil
		}
		removed = true
		return sp.dir.Remove(rel)
	}
	if raw == nil {
		// Unlinked at once: the file lives as long as its mapping, and
		// a crash leaves nothing behind but what the next start removes.
		if err := remove(); err != nil {
			unreserve()
			return nil, nil, false, fmt.Errorf("spilling %s: %w", s.Name, err)
		}
	}
	fail := func(err error) ([]byte, func(), bool, error) {
		_ = remove()
		unreserve()
		return nil, nil, false, fmt.Errorf("spilling %s: %w", s.Name, err)
	}
	// The decompressed size is the header's; a stream longer or
	// shorter than that is corrupt.
	h := crc32.New(castagnoli)
	if _, err := f.Seek(keptHeaderSize, io.SeekStart); err != nil {
		return fail(err)
	}
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(elfbin.SectionReader(elfFile, s, raw), size+1))
	sp.inflated.Add(n)
	if err == nil && n != size {
		err = fmt.Errorf("decompressed to %d bytes, header says %d", n, size)
	}
	if err != nil {
		return fail(err)
	}
	if _, err := f.WriteAt(keptHeader(key, size, h.Sum32()), 0); err != nil {
		return fail(err)
	}
	m, err := elfbin.Map(f)
	if err != nil || int64(len(m)) != keptHeaderSize+size {
		elfbin.Unmap(m)
		return fail(errors.Join(errors.New("mapping it"), err))
	}
	if raw != nil && !sp.keep(rel, key, keptHeaderSize+size) {
		_ = remove()
	}
	// Writing left the pages in the page cache, not in the RSS; reading
	// maps only those lookups touch.
	return mapped(m)
}

// spilledSections are a Binary's sections spilled to disk, mapped until the
// Binary is closed: evicting the parsed DWARF from the table cache and
// parsing it again reads them in place, with no new decompression.
type spilledSections struct {
	// spill is the Binary's Tables' slot of the spill to decompress to.
	spill    *atomic.Pointer[sectionSpill]
	mu       sync.Mutex
	data     map[string][]byte
	releases []func()
	// prefixes are the sections decompressed only as far as reads need,
	// by name, until read whole.
	prefixes map[string]*prefixSection
}

// to returns the spill sections are decompressed to, nil for the heap.
func (ss *spilledSections) to() *sectionSpill {
	if ss == nil || ss.spill == nil {
		return nil
	}
	return ss.spill.Load()
}

// get returns s's spilled content, spilling it on first use; raw is its
// compressed bytes, nil when not at hand. ok is false when s is to be
// decompressed into the heap. A section read by prefix so far is
// decompressed on to its end.
// Inflated is get for sections.Image: a section that cannot be spilled is
// decompressed into the heap instead.
func (ss *spilledSections) Inflated(f *elf.File, s *elf.Section, raw []byte) ([]byte, bool) {
	d, ok, _ := ss.get(f, s, raw)
	return d, ok
}

func (ss *spilledSections) get(f *elf.File, s *elf.Section, raw []byte) ([]byte, bool, error) {
	sp := ss.to()
	if sp == nil {
		return nil, false, nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if d, ok := ss.data[s.Name]; ok {
		return d, true, nil
	}
	if p, ok := ss.prefixes[s.Name]; ok {
		d, err := p.whole()
		if err != nil {
			// Still mapped, until closed with the others: the front
			// read so far may still be in use.
			return nil, false, err
		}
		delete(ss.prefixes, s.Name)
		ss.keep(s.Name, d, p.close)
		return d, true, nil
	}
	d, release, ok, err := sp.decompress(f, s, raw)
	if !ok {
		return nil, false, err
	}
	ss.keep(s.Name, d, release)
	return d, true, nil
}

func (ss *spilledSections) keep(name string, d []byte, release func()) {
	if ss.data == nil {
		ss.data = map[string][]byte{}
	}
	ss.data[name] = d
	ss.releases = append(ss.releases, release)
}

// Prefix is prefixOf for dwarfsym.
func (ss *spilledSections) Prefix(f *elf.File, s *elf.Section, raw []byte) (dwarfsym.Prefix, []byte, bool) {
	p, whole, ok, _ := ss.prefixOf(f, s, raw)
	if p == nil {
		return nil, whole, ok // no typed nil in the interface
	}
	return p, whole, ok
}

// prefixOf returns s to be decompressed as far as reads need, or whole
// when it already is; ok is false when s is to be read whole.
func (ss *spilledSections) prefixOf(f *elf.File, s *elf.Section, raw []byte) (p *prefixSection, whole []byte, ok bool, err error) {
	sp := ss.to()
	if sp == nil {
		return nil, nil, false, nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if d, ok := ss.data[s.Name]; ok {
		return nil, d, true, nil
	}
	if p, ok := ss.prefixes[s.Name]; ok {
		return p, nil, true, nil
	}
	p, ok, err = sp.prefix(f, s, raw)
	if !ok {
		return nil, nil, false, err
	}
	if ss.prefixes == nil {
		ss.prefixes = map[string]*prefixSection{}
	}
	ss.prefixes[s.Name] = p
	return p, nil, true, nil
}

// DropPages takes the spilled pages read so far out of the RSS.
func (ss *spilledSections) DropPages() {
	if ss == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, d := range ss.data {
		elfbin.DropPages(d)
	}
	for _, p := range ss.prefixes {
		elfbin.DropPages(p.Data()[:p.Length()])
	}
}

// close unmaps the spilled sections; nothing read from them may be used
// after.
func (ss *spilledSections) close() {
	if ss == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, r := range ss.releases {
		r()
	}
	for _, p := range ss.prefixes {
		p.close()
	}
	ss.data, ss.releases, ss.prefixes = nil, nil, nil
}

// acquireSectionSpill returns the section spill under cacheDir, opened
// (and what a crash left there removed) by its first user. Each user
// gives it back with release: the directory stays open only while one
// holds it.
func acquireSectionSpill(cacheDir string, maxBytes int64) (*sectionSpill, error) {
	dir := filepath.Clean(cacheDir)
	openSpills.mu.Lock()
	defer openSpills.mu.Unlock()
	sp := openSpills.byDir[dir]
	if sp == nil {
		var err error
		if sp, err = openSectionSpill(dir, maxBytes); err != nil {
			return nil, err
		}
		if openSpills.byDir == nil {
			openSpills.byDir = map[string]*sectionSpill{}
		}
		openSpills.byDir[dir] = sp
	}
	sp.users++
	return sp, nil
}

// release gives back a spill acquireSectionSpill returned. The last user
// closes its directory; sections already mapped stay readable (a mapping
// needs no descriptor), and a Binary still spilling at that moment gets
// an error from the closed directory, never another file.
func (sp *sectionSpill) release() {
	openSpills.mu.Lock()
	defer openSpills.mu.Unlock()
	if sp.users--; sp.users > 0 {
		return
	}
	if openSpills.byDir[sp.dir.Name()] == sp {
		delete(openSpills.byDir, sp.dir.Name())
	}
	_ = sp.dir.Close()
}
