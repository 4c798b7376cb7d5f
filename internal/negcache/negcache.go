// Package negcache remembers files that turned out to have nothing to use
// (nothing to symbolize, nothing to instrument), so the next process running
// the same binary does not parse it again.
//
// Entries are keyed by device and inode. The size and modification time seen
// when the entry was added are compared on every lookup, so a binary replaced
// in place, or an inode recycled for another file, is evaluated afresh
// without hashing its content. A TTL bounds how long a replacement that
// preserves both size and mtime (cp -p, tar -xp) is served the stale verdict.
package negcache

import (
	"container/list"
	"sync"
	"time"
)

// Key identifies a file by device and inode.
type Key struct{ Dev, Ino uint64 }

// File is what a lookup knows about a file: its key, and the size and
// modification time that must still match a cached verdict.
type File struct {
	Key
	Size    int64
	ModTime time.Time
}

type entry struct {
	file    File
	expires time.Time
	elem    *list.Element
}

// Cache is a bounded set of files with nothing to use. It never holds a
// positive verdict: callers only add files that failed. Safe for concurrent
// use.
type Cache struct {
	ttl        time.Duration
	maxEntries int
	now        func() time.Time

	mu        sync.Mutex
	entries   map[Key]*entry
	order     *list.List // of *entry, oldest insertion at the front
	nextSweep time.Time
}

// Option configures a Cache.
type Option func(*Cache)

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(c *Cache) { c.now = now } }

// New returns a Cache whose entries live for ttl, holding at most maxEntries
// (at least 1); beyond that the oldest entry is dropped.
func New(ttl time.Duration, maxEntries int, opts ...Option) *Cache {
	c := &Cache{
		ttl:        ttl,
		maxEntries: max(maxEntries, 1),
		now:        time.Now,
		entries:    make(map[Key]*entry),
		order:      list.New(),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Contains reports whether f is cached with the same size and mtime and has
// not expired. A stale or mismatching entry is dropped.
func (c *Cache) Contains(f File) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[f.Key]
	if !ok {
		return false
	}
	if !c.now().Before(e.expires) || e.file.Size != f.Size || !e.file.ModTime.Equal(f.ModTime) {
		c.removeLocked(e)
		return false
	}
	return true
}

// Add remembers f as having nothing to use. Re-adding a key replaces its
// entry, so a path overwritten in place keeps one entry.
func (c *Cache) Add(f File) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.sweepLocked(now)
	if e, ok := c.entries[f.Key]; ok {
		c.removeLocked(e)
	}
	for c.order.Len() >= c.maxEntries {
		c.removeLocked(c.order.Front().Value.(*entry))
	}
	e := &entry{file: f, expires: now.Add(c.ttl)}
	e.elem = c.order.PushBack(e)
	c.entries[f.Key] = e
}

// Remove forgets key, for callers that learn the file became usable.
func (c *Cache) Remove(key Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		c.removeLocked(e)
	}
}

// Len returns the number of entries, expired ones not yet dropped included.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// sweepLocked drops expired entries, at most once per TTL so a burst of
// inserts does not scan the whole map each time.
func (c *Cache) sweepLocked(now time.Time) {
	if now.Before(c.nextSweep) {
		return
	}
	c.nextSweep = now.Add(c.ttl)
	// One TTL for all entries keeps insertion order equal to expiry order.
	for el := c.order.Front(); el != nil; el = c.order.Front() {
		e := el.Value.(*entry)
		if now.Before(e.expires) {
			return
		}
		c.removeLocked(e)
	}
}

func (c *Cache) removeLocked(e *entry) {
	c.order.Remove(e.elem)
	delete(c.entries, e.file.Key)
}
