// Package negcache remembers things that turned out to have nothing to use
// (a binary with nothing to symbolize or instrument, a debug file that does
// not parse, a build-id no server has), so the next lookup does not pay for
// finding that out again.
//
// An entry is a version of something: files are keyed by device and inode
// and versioned by size and modification time, so a binary replaced in
// place, or an inode recycled for another file, is evaluated afresh without
// hashing its content. A TTL bounds how long a replacement that preserves
// both size and mtime (cp -p, tar -xp) is served the stale verdict, and how
// long a failure that may heal (a fetch) is remembered.
package negcache

import (
	"sync"
	"time"

	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

type entry[V any] struct {
	version V
	expires time.Time
}

// Cache is a bounded set of things with nothing to use, each remembered as
// one version V under its key K. It never holds a positive verdict: callers
// only add what failed. Safe for concurrent use.
type Cache[K comparable, V any] struct {
	ttl   time.Duration
	now   func() time.Time
	keyOf func(V) K
	same  func(a, b V) bool

	mu        sync.Mutex // makes a lookup and the drop after it one step
	entries   *lru.Cache[K, entry[V]]
	nextSweep time.Time
}

// Files is the negative cache of files: keyed by device and inode, a verdict
// holds only while size and modification time are unchanged.
type Files = Cache[process.FileKey, process.FileID]

// Option configures a Cache.
type Option func(*options)

type options struct{ now func() time.Time }

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// NewFiles returns a cache of files whose entries live for ttl, holding at
// most maxEntries (at least 1); beyond that the least recently used entry
// is dropped.
func NewFiles(ttl time.Duration, maxEntries int, opts ...Option) *Files {
	return newCache(ttl, maxEntries, func(f process.FileID) process.FileKey { return f.FileKey }, process.FileID.Same, opts)
}

// NewKeys returns a cache of plain keys (a build-id, a name) whose entries
// live for ttl, holding at most maxEntries (at least 1).
func NewKeys[K comparable](ttl time.Duration, maxEntries int, opts ...Option) *Cache[K, K] {
	return newCache(ttl, maxEntries, func(k K) K { return k }, func(a, b K) bool { return a == b }, opts)
}

func newCache[K comparable, V any](ttl time.Duration, maxEntries int, keyOf func(V) K, same func(a, b V) bool, opts []Option) *Cache[K, V] {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	return &Cache[K, V]{
		ttl:     ttl,
		now:     o.now,
		keyOf:   keyOf,
		same:    same,
		entries: lru.New[K, entry[V]](int64(max(maxEntries, 1)), nil),
	}
}

// Contains reports whether v is cached, as the same version, and has not
// expired. A stale or mismatching entry is dropped.
func (c *Cache[K, V]) Contains(v V) bool {
	key := c.keyOf(v)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries.Get(key)
	if !ok {
		return false
	}
	if !c.now().Before(e.expires) || !c.same(e.version, v) {
		c.entries.Remove(key)
		return false
	}
	return true
}

// Add remembers v as having nothing to use. Adding another version under
// the same key replaces the entry, so a path overwritten in place keeps one.
func (c *Cache[K, V]) Add(v V) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweepLocked(now)
	c.entries.Add(c.keyOf(v), entry[V]{version: v, expires: now.Add(c.ttl)})
}

// Remove forgets key, for callers that learn the thing became usable.
func (c *Cache[K, V]) Remove(key K) { c.entries.Remove(key) }

// Len returns the number of entries, expired ones not yet dropped included.
func (c *Cache[K, V]) Len() int { return c.entries.Len() }

// Stats returns the size, hits and evictions of the cache.
func (c *Cache[K, V]) Stats() lru.Stats { return c.entries.Stats() }

// sweepLocked drops expired entries, at most once per TTL so a burst of
// inserts does not scan the whole cache each time.
func (c *Cache[K, V]) sweepLocked(now time.Time) {
	if now.Before(c.nextSweep) {
		return
	}
	c.nextSweep = now.Add(c.ttl)
	c.entries.RemoveFunc(func(_ K, e entry[V]) bool { return !now.Before(e.expires) })
}
