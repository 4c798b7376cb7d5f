package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bpfcol/bpfcol/internal/safefs"
)

// sectionSpill decompresses compressed debug sections (libc6-dbg's, Go's
// zlib DWARF) into unlinked files of a private directory and maps them
// read-only, instead of holding them in the Go heap: the page cache keeps
// them, and the process's RSS holds only the pages a lookup touched. The
// files' summed size is bounded; a section beyond the bound is
// decompressed into the heap, and counted.
type sectionSpill struct {
	dir      *safefs.Dir
	max      int64
	used     atomic.Int64
	sections atomic.Uint64 // sections spilled
	refused  atomic.Uint64 // sections decompressed into the heap: no room
}

// spillSubdir is the directory under the debug cache that holds the
// spilled sections while they are mapped (they are unlinked at once).
const spillSubdir = "sections"

// spillPrefix names a spilled section's file in the short time between
// its creation and its unlinking.
const spillPrefix = ".section-"

// DefaultMaxSpillBytes bounds the disk the decompressed debug sections of
// the open binaries take.
const DefaultMaxSpillBytes = 1 << 30

// spill is where the process's Binaries spill their sections; nil keeps
// them in the heap.
var spill atomic.Pointer[sectionSpill]

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
	return &sectionSpill{dir: root, max: maxBytes}, nil
}

// SpillStats are the counts of the sections decompressed to disk.
type SpillStats struct {
	// Bytes is the size of the sections spilled and mapped now.
	Bytes int64
	// Sections counts sections spilled; Refused those decompressed into
	// the heap because the bound was reached.
	Sections, Refused uint64
}

// SectionSpillStats returns the counts of the process's section spill.
func SectionSpillStats() SpillStats {
	sp := spill.Load()
	if sp == nil {
		return SpillStats{}
	}
	return SpillStats{Bytes: sp.used.Load(), Sections: sp.sections.Load(), Refused: sp.refused.Load()}
}

// decompress writes the content of the compressed section s to a new
// unlinked file and maps it. ok is false when s cannot be spilled (no
// room, a .zdebug section whose size is not known up front): the caller
// decompresses into the heap.
func (sp *sectionSpill) decompress(s *elf.Section) (data []byte, release func(), ok bool, err error) {
	if s.Flags&elf.SHF_COMPRESSED == 0 || s.Size == 0 || s.Size > maxMappedFile {
		return nil, nil, false, nil
	}
	size := int64(s.Size)
	if sp.used.Add(size) > sp.max {
		sp.used.Add(-size)
		sp.refused.Add(1)
		return nil, nil, false, nil
	}
	unreserve := func() { sp.used.Add(-size) }
	f, rel, err := sp.dir.CreateTemp(spillSubdir, spillPrefix)
	if err != nil {
		unreserve()
		return nil, nil, false, fmt.Errorf("spilling %s: %w", s.Name, err)
	}
	defer f.Close()
	// Unlinked at once: the file lives as long as its mapping, and a
	// crash leaves nothing behind but what the next start removes.
	if err := sp.dir.Remove(rel); err != nil {
		unreserve()
		return nil, nil, false, fmt.Errorf("spilling %s: %w", s.Name, err)
	}
	// The decompressed size is the header's; a stream longer or
	// shorter than that is corrupt.
	n, err := io.Copy(f, io.LimitReader(s.Open(), size+1))
	if err == nil && n != size {
		err = fmt.Errorf("decompressed to %d bytes, header says %d", n, size)
	}
	if err != nil {
		unreserve()
		return nil, nil, false, fmt.Errorf("spilling %s: %w", s.Name, err)
	}
	data, err = mapFile(f)
	if err != nil || int64(len(data)) != size {
		unmapFile(data)
		unreserve()
		return nil, nil, false, errors.Join(fmt.Errorf("mapping spilled %s", s.Name), err)
	}
	// Writing left the pages in the page cache, not in the RSS; reading
	// maps only those lookups touch.
	sp.sections.Add(1)
	var once sync.Once
	return data, func() {
		once.Do(func() {
			unmapFile(data)
			unreserve()
		})
	}, true, nil
}

// spilledSections are a Binary's sections spilled to disk, mapped until the
// Binary is closed: evicting the parsed DWARF from the table cache and
// parsing it again reads them in place, with no new decompression.
type spilledSections struct {
	mu       sync.Mutex
	data     map[string][]byte
	releases []func()
}

// get returns s's spilled content, spilling it on first use; ok is false
// when s is to be decompressed into the heap.
func (ss *spilledSections) get(s *elf.Section) ([]byte, bool, error) {
	sp := spill.Load()
	if ss == nil || sp == nil {
		return nil, false, nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if d, ok := ss.data[s.Name]; ok {
		return d, true, nil
	}
	d, release, ok, err := sp.decompress(s)
	if !ok {
		return nil, false, err
	}
	if ss.data == nil {
		ss.data = map[string][]byte{}
	}
	ss.data[s.Name] = d
	ss.releases = append(ss.releases, release)
	return d, true, nil
}

// dropPages takes the spilled pages read so far out of the RSS.
func (ss *spilledSections) dropPages() {
	if ss == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, d := range ss.data {
		dropPages(d)
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
	ss.data, ss.releases = nil, nil
}

// setSectionSpill has the process's Binaries spill their compressed
// sections under cacheDir; "" keeps them in the heap.
func setSectionSpill(cacheDir string, maxBytes int64) error {
	if cacheDir == "" {
		return nil
	}
	if old := spill.Load(); old != nil && old.dir.Name() == filepath.Clean(cacheDir) {
		return nil
	}
	sp, err := openSectionSpill(filepath.Clean(cacheDir), maxBytes)
	if err != nil {
		return err
	}
	// A spill replaced stays open: Binaries may still map its files.
	spill.Store(sp)
	return nil
}
