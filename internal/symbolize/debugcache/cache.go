// Package debugcache keeps fetched debug files on disk, laid out as
// DIR/.build-id/NN/REST.debug like /usr/lib/debug, under a size limit with
// least-recently-used eviction. It survives restarts: the index is rebuilt
// from the directory, ordered by modification time, which Lookup updates.
//
// The cache trusts nothing it finds on disk. Its root must be owned by the
// user running bpfcol and closed to group and others; every path beneath it
// is resolved by the kernel relative to the root's descriptor with no
// symlink followed (see internal/safefs). A symlink, anything but a regular
// file, or a file owned by someone else where a debug file belongs is
// corrupt: it is removed, never followed, and counted (Corrupt).
package debugcache

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bpfcol/bpfcol/internal/safefs"
	"github.com/bpfcol/bpfcol/internal/symbolize/buildid"
)

// Errors callers can tell apart.
var (
	// ErrInvalidBuildID means a build-id fails buildid.Valid.
	ErrInvalidBuildID = errors.New("build-id is not 4 to 128 lowercase hex characters")
	// ErrCorrupt means what the cache held for a build-id was not a
	// regular file of ours; it has been removed.
	ErrCorrupt = errors.New("corrupt debug cache entry removed")
	// ErrFull means a download alone would exceed the cache's size limit.
	ErrFull = errors.New("download exceeds the debug cache size limit")
)

const (
	buildIDDir = ".build-id"
	// tempPrefix names downloads in progress; leftovers of a crash are
	// removed by Open.
	tempPrefix = ".fetch-"
)

// Cache is a size-bounded directory of debug files. Safe for concurrent use
// within one process.
type Cache struct {
	root    *safefs.Dir
	dir     string
	maxSize int64
	uid     uint32
	corrupt atomic.Int64

	mu    sync.Mutex
	total int64                    // bytes of the files indexed
	temp  int64                    // bytes of downloads in progress
	index map[string]*list.Element // build-id → element of lru
	lru   *list.List               // of *item, most recently used at the front
}

type item struct {
	buildID string
	size    int64
}

// Open opens dir as the cache, creating it with mode 0700 if needed, and
// indexes the debug files already in it. dir must be owned by the
// effective uid and not writable by group or others, or Open fails naming
// it. maxSize <= 0 means no limit.
func Open(dir string, maxSize int64) (*Cache, error) {
	root, err := safefs.OpenPrivate(dir)
	if err != nil {
		return nil, fmt.Errorf("opening debug cache: %w", err)
	}
	c := &Cache{root: root, dir: dir, maxSize: maxSize, uid: uint32(os.Geteuid()), index: map[string]*list.Element{}, lru: list.New()}
	if err := c.ensureDir(buildIDDir); err != nil {
		root.Close()
		return nil, fmt.Errorf("opening debug cache %s: %w", dir, err)
	}
	type found struct {
		item
		mtime time.Time
	}
	var all []found
	prefixes, err := root.ReadDir(buildIDDir)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("indexing debug cache %s: %w", dir, err)
	}
	for _, nn := range prefixes {
		sub := buildIDDir + "/" + nn
		if info, err := root.Lstat(sub); err != nil || !c.isOurs(info, fs.ModeDir) {
			c.removeCorrupt(sub)
			continue
		}
		names, err := root.ReadDir(sub)
		if err != nil {
			continue
		}
		for _, name := range names {
			rel := sub + "/" + name
			if strings.HasPrefix(name, tempPrefix) {
				// A download interrupted by a crash.
				root.Remove(rel)
				continue
			}
			info, err := root.Lstat(rel)
			if err != nil {
				continue
			}
			if !c.isOurs(info, 0) {
				c.removeCorrupt(rel)
				continue
			}
			rest, ok := strings.CutSuffix(name, ".debug")
			if id := nn + rest; ok && buildid.Valid(id) {
				all = append(all, found{item{id, info.Size}, info.ModTime})
			}
		}
	}
	// Oldest first, so each PushFront leaves the newest at the front.
	slices.SortFunc(all, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	for _, f := range all {
		it := f.item
		c.index[it.buildID] = c.lru.PushFront(&it)
		c.total += it.size
	}
	c.mu.Lock()
	c.evictLocked("")
	c.mu.Unlock()
	return c, nil
}

// isOurs reports whether info describes an entry of type typ (0 for a
// regular file) owned by the cache's user.
func (c *Cache) isOurs(info safefs.Info, typ fs.FileMode) bool {
	return info.Mode.Type() == typ && info.UID == c.uid
}

// removeCorrupt removes rel, which is not what the cache would have put
// there, and counts it.
func (c *Cache) removeCorrupt(rel string) {
	c.corrupt.Add(1)
	c.root.Remove(rel)
}

// ensureDir creates the directory rel; a link or a foreign entry in its
// place is removed as corrupt first.
func (c *Cache) ensureDir(rel string) error {
	if info, err := c.root.Lstat(rel); err == nil && !c.isOurs(info, fs.ModeDir) {
		c.removeCorrupt(rel)
	}
	return c.root.Mkdir(rel, 0o700)
}

// Close releases the cache's directory.
func (c *Cache) Close() error { return c.root.Close() }

// Dir returns the cache's root directory.
func (c *Cache) Dir() string { return c.dir }

// Corrupt returns how many entries were removed for being a symlink,
// not a regular file, or not owned by the cache's user.
func (c *Cache) Corrupt() int64 { return c.corrupt.Load() }

func rel(buildID string) (string, error) {
	if !buildid.Valid(buildID) {
		return "", fmt.Errorf("locating %q in the debug cache: %w", buildID, ErrInvalidBuildID)
	}
	return buildIDDir + "/" + buildID[:2] + "/" + buildID[2:] + ".debug", nil
}

// Path returns where the debug file of buildID lives, whether or not it
// exists. It is for messages and for BuildID: open it with Open, never by
// the path.
func (c *Cache) Path(buildID string) (string, error) {
	r, err := rel(buildID)
	if err != nil {
		return "", err
	}
	return filepath.Join(c.dir, r), nil
}

// BuildID returns the build-id whose Path is p, if p is one.
func (c *Cache) BuildID(p string) (string, bool) {
	r, ok := strings.CutPrefix(p, c.dir+string(filepath.Separator)+buildIDDir+string(filepath.Separator))
	if !ok {
		return "", false
	}
	nn, rest, ok := strings.Cut(r, string(filepath.Separator))
	if !ok {
		return "", false
	}
	rest, ok = strings.CutSuffix(rest, ".debug")
	if id := nn + rest; ok && buildid.Valid(id) && len(nn) == 2 {
		return id, true
	}
	return "", false
}

// Lookup returns the path of buildID's file if the cache holds a sound
// one, and marks it used.
func (c *Cache) Lookup(buildID string) (string, bool) {
	p, err := c.Path(buildID)
	if err != nil {
		return "", false
	}
	c.mu.Lock()
	_, ok := c.index[buildID]
	c.mu.Unlock()
	if !ok {
		return "", false
	}
	f, err := c.Open(buildID)
	if err != nil {
		return "", false
	}
	f.Close()
	return p, true
}

// Open opens buildID's file for reading and marks it used. A symlink
// anywhere on the way, a file that is not regular or not the cache user's
// is removed and reported as ErrCorrupt; nothing it points to is opened.
func (c *Cache) Open(buildID string) (*os.File, error) {
	r, err := rel(buildID)
	if err != nil {
		return nil, err
	}
	f, err := c.root.Open(r)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			c.forget(buildID)
			return nil, fmt.Errorf("opening %s from the debug cache: %w", buildID, err)
		}
		c.purge(buildID)
		return nil, fmt.Errorf("opening %s from the debug cache: %w (%w)", buildID, ErrCorrupt, err)
	}
	uid, regular, err := safefs.Owner(f)
	if err != nil || !regular || uid != c.uid {
		f.Close()
		c.purge(buildID)
		return nil, fmt.Errorf("opening %s from the debug cache: %w (owned by uid %d)", buildID, ErrCorrupt, uid)
	}
	c.mu.Lock()
	if el, ok := c.index[buildID]; ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	// The mtime carries the LRU order across restarts.
	safefs.Touch(f)
	return f, nil
}

// purge removes whatever stands in the way of buildID's file: a link or
// foreign entry in place of its NN directory, or of the file itself.
func (c *Cache) purge(buildID string) {
	c.forget(buildID)
	sub := buildIDDir + "/" + buildID[:2]
	if info, err := c.root.Lstat(sub); err == nil && !c.isOurs(info, fs.ModeDir) {
		c.removeCorrupt(sub)
		return
	}
	r, _ := rel(buildID)
	if info, err := c.root.Lstat(r); err == nil && !c.isOurs(info, 0) {
		c.removeCorrupt(r)
	}
}

// forget drops buildID from the index without touching the disk.
func (c *Cache) forget(buildID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[buildID]; ok {
		c.total -= el.Value.(*item).size
		c.lru.Remove(el)
		delete(c.index, buildID)
	}
}

// Added records a file just written at buildID's place and evicts the
// least recently used files beyond the size limit (never the one just
// added).
func (c *Cache) Added(buildID string) error {
	r, err := rel(buildID)
	if err != nil {
		return err
	}
	info, err := c.root.Lstat(r)
	if err != nil {
		return fmt.Errorf("recording %s in the debug cache: %w", buildID, err)
	}
	if !c.isOurs(info, 0) {
		c.purge(buildID)
		return fmt.Errorf("recording %s in the debug cache: %w", buildID, ErrCorrupt)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(buildID, info.Size)
	return nil
}

func (c *Cache) addLocked(buildID string, size int64) {
	if el, ok := c.index[buildID]; ok {
		c.total -= el.Value.(*item).size
		c.lru.Remove(el)
	}
	c.index[buildID] = c.lru.PushFront(&item{buildID, size})
	c.total += size
	c.evictLocked(buildID)
}

// Remove deletes buildID's file, for example after it failed to parse.
func (c *Cache) Remove(buildID string) {
	r, err := rel(buildID)
	if err != nil {
		return
	}
	c.forget(buildID)
	c.root.Remove(r)
}

// Size returns the bytes held, downloads in progress included.
func (c *Cache) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total + c.temp
}

// Len returns the number of files held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

func (c *Cache) evictLocked(keep string) {
	if c.maxSize <= 0 {
		return
	}
	for c.total+c.temp > c.maxSize && c.lru.Len() > 0 {
		back := c.lru.Back()
		it := back.Value.(*item)
		if it.buildID == keep {
			if c.lru.Len() == 1 {
				return
			}
			c.lru.MoveToFront(back)
			continue
		}
		c.lru.Remove(back)
		delete(c.index, it.buildID)
		c.total -= it.size
		if r, err := rel(it.buildID); err == nil {
			c.root.Remove(r)
		}
	}
}

// reserve accounts n more bytes of downloads in progress, evicting files
// to make room. It fails when downloads alone would exceed the limit.
func (c *Cache) reserve(n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.maxSize > 0 && c.temp+n > c.maxSize {
		return ErrFull
	}
	c.temp += n
	c.evictLocked("")
	return nil
}

func (c *Cache) release(n int64) {
	c.mu.Lock()
	c.temp -= n
	c.mu.Unlock()
}

// Room returns how many bytes one download may take: the size limit, or
// -1 for none.
func (c *Cache) Room() int64 {
	if c.maxSize <= 0 {
		return -1
	}
	return c.maxSize
}

// Temp is a download in progress: a file next to its final place whose
// bytes count toward the cache's size limit from the first write.
type Temp struct {
	c       *Cache
	f       *os.File
	rel     string
	buildID string
	n       int64
	done    bool
}

// Create starts buildID's download in a temporary file.
func (c *Cache) Create(buildID string) (*Temp, error) {
	if _, err := rel(buildID); err != nil {
		return nil, err
	}
	sub := buildIDDir + "/" + buildID[:2]
	if err := c.ensureDir(sub); err != nil {
		return nil, fmt.Errorf("creating %s in the debug cache: %w", buildID, err)
	}
	f, r, err := c.root.CreateTemp(sub, tempPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating %s in the debug cache: %w", buildID, err)
	}
	return &Temp{c: c, f: f, rel: r, buildID: buildID}, nil
}

// Write appends p, failing with ErrFull when the cache cannot make room.
func (t *Temp) Write(p []byte) (int, error) {
	if err := t.c.reserve(int64(len(p))); err != nil {
		return 0, err
	}
	n, err := t.f.Write(p)
	t.n += int64(n)
	if d := len(p) - n; d > 0 {
		t.c.release(int64(d))
	}
	return n, err
}

// File returns the temporary file, for reading back what was written.
func (t *Temp) File() *os.File { return t.f }

// Commit syncs the file and renames it into buildID's place.
func (t *Temp) Commit() error {
	if t.done {
		return errors.New("committing a finished download")
	}
	t.done = true
	err := t.f.Sync()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	final, _ := rel(t.buildID)
	if err == nil {
		err = t.c.root.Rename(t.rel, final)
	}
	if err != nil {
		t.c.root.Remove(t.rel)
		t.c.release(t.n)
		return fmt.Errorf("storing %s in the debug cache: %w", t.buildID, err)
	}
	t.c.mu.Lock()
	t.c.temp -= t.n
	t.c.addLocked(t.buildID, t.n)
	t.c.mu.Unlock()
	return nil
}

// Discard removes the temporary file; after Commit it does nothing.
func (t *Temp) Discard() {
	if t.done {
		return
	}
	t.done = true
	t.f.Close()
	t.c.root.Remove(t.rel)
	t.c.release(t.n)
}
