// Package debugcache keeps fetched debug files on disk, laid out as
// DIR/.build-id/NN/REST.debug like /usr/lib/debug, under a size limit with
// least-recently-used eviction. It survives restarts: the index is rebuilt
// from the directory, ordered by modification time, which Touch updates.
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
	"time"
)

// ErrInvalidBuildID means a build-id is not lowercase hex.
var ErrInvalidBuildID = errors.New("build-id is not lowercase hex")

// Cache is a size-bounded directory of debug files. Safe for concurrent use
// within one process.
type Cache struct {
	dir     string
	maxSize int64

	mu    sync.Mutex
	total int64
	index map[string]*list.Element // build-id → element of lru
	lru   *list.List               // of *item, most recently used at the front
}

type item struct {
	buildID string
	size    int64
}

// Open creates dir (mode 0700) if needed and indexes the files already in
// it. maxSize <= 0 means no limit.
func Open(dir string, maxSize int64) (*Cache, error) {
	root := filepath.Join(dir, ".build-id")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("creating debug cache %s: %w", dir, err)
	}
	// MkdirAll leaves an existing directory's mode alone; debug files can
	// reveal source paths, so keep them private.
	for _, d := range []string{dir, root} {
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("restricting debug cache %s: %w", d, err)
		}
	}
	c := &Cache{dir: dir, maxSize: maxSize, index: map[string]*list.Element{}, lru: list.New()}
	type found struct {
		item
		mtime time.Time
	}
	var all []found
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, ".fetch-") {
			// A download interrupted by a crash.
			os.Remove(p)
			return nil
		}
		rest, ok := strings.CutSuffix(name, ".debug")
		id := filepath.Base(filepath.Dir(p)) + rest
		if !ok || !validBuildID(id) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		all = append(all, found{item{id, info.Size()}, info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("indexing debug cache %s: %w", dir, err)
	}
	// Oldest first, so each PushFront leaves the newest at the front.
	sortByTime := func(a, b found) int { return a.mtime.Compare(b.mtime) }
	slices.SortFunc(all, sortByTime)
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

// Dir returns the cache's root directory.
func (c *Cache) Dir() string { return c.dir }

// Path returns where the debug file of buildID lives, whether or not it
// exists.
func (c *Cache) Path(buildID string) (string, error) {
	if !validBuildID(buildID) {
		return "", fmt.Errorf("locating %q in the debug cache: %w", buildID, ErrInvalidBuildID)
	}
	return filepath.Join(c.dir, ".build-id", buildID[:2], buildID[2:]+".debug"), nil
}

// Lookup returns the path of buildID's file if the cache holds it, and
// marks it used.
func (c *Cache) Lookup(buildID string) (string, bool) {
	p, err := c.Path(buildID)
	if err != nil {
		return "", false
	}
	c.mu.Lock()
	el, ok := c.index[buildID]
	if ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	if !ok {
		return "", false
	}
	now := time.Now()
	// The mtime carries the LRU order across restarts.
	if err := os.Chtimes(p, now, now); err != nil {
		c.Remove(buildID)
		return "", false
	}
	return p, true
}

// Added records a file just written at Path(buildID) and evicts the least
// recently used files beyond the size limit (never the one just added).
func (c *Cache) Added(buildID string) error {
	p, err := c.Path(buildID)
	if err != nil {
		return err
	}
	info, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("recording %s in the debug cache: %w", buildID, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[buildID]; ok {
		c.total -= el.Value.(*item).size
		c.lru.Remove(el)
	}
	c.index[buildID] = c.lru.PushFront(&item{buildID, info.Size()})
	c.total += info.Size()
	c.evictLocked(buildID)
	return nil
}

// Remove deletes buildID's file, for example after it failed to parse.
func (c *Cache) Remove(buildID string) {
	p, err := c.Path(buildID)
	if err != nil {
		return
	}
	c.mu.Lock()
	if el, ok := c.index[buildID]; ok {
		c.total -= el.Value.(*item).size
		c.lru.Remove(el)
		delete(c.index, buildID)
	}
	c.mu.Unlock()
	os.Remove(p)
}

// Size returns the bytes held.
func (c *Cache) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
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
	for c.total > c.maxSize && c.lru.Len() > 0 {
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
		if p, err := c.Path(it.buildID); err == nil {
			os.Remove(p)
		}
	}
}

func validBuildID(id string) bool {
	if len(id) < 4 || len(id) > 128 || len(id)%2 != 0 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
