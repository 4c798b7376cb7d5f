package symbolize

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/bpfcol/bpfcol/internal/process"
)

// ErrCacheClosed is returned by BinaryCache.Get after Close.
var ErrCacheClosed = errors.New("binary cache is closed")

// cacheEntry is one key of a BinaryCache. ready is closed once the open
// attempt finished; b and err are immutable afterwards.
type cacheEntry struct {
	key   process.FileKey
	ready chan struct{}
	b     *Binary
	err   error
	elem  *list.Element // position in the LRU list, nil while opening
}

// BinaryCache is a bounded LRU of opened Binaries keyed by process.FileKey. Each key
// is opened at most once at a time: concurrent Gets for a key being opened
// wait for that open. Failed opens are not cached. Evicting a Binary gives up
// the cache's reference, so its file is closed once the last reader released
// it. Safe for concurrent use.
type BinaryCache struct {
	maxEntries int

	mu      sync.Mutex
	entries map[process.FileKey]*cacheEntry
	lru     *list.List // of *cacheEntry, most recently used at the front
	closed  bool
}

// NewBinaryCache returns a cache holding at most maxEntries Binaries
// (at least 1).
func NewBinaryCache(maxEntries int) *BinaryCache {
	return &BinaryCache{
		maxEntries: max(maxEntries, 1),
		entries:    make(map[process.FileKey]*cacheEntry),
		lru:        list.New(),
	}
}

// Get returns the Binary for key, calling open and OpenBinary on a miss.
// The caller holds a reference and must call Release on the Binary when
// done with it (never Close: that reference belongs to the cache).
func (c *BinaryCache) Get(key process.FileKey, open func() (*os.File, error)) (*Binary, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrCacheClosed
	}
	if e, ok := c.entries[key]; ok {
		if e.elem != nil {
			c.lru.MoveToFront(e.elem)
			e.b.acquire()
			c.mu.Unlock()
			return e.b, nil
		}
		c.mu.Unlock()
		b, evicted, err := c.wait(e)
		if evicted {
			// Evicted between its open finishing and now: open it again.
			return c.Get(key, open)
		}
		return b, err
	}
	e := &cacheEntry{key: key, ready: make(chan struct{})}
	c.entries[key] = e
	c.mu.Unlock()

	b, err := openBinary(open)

	c.mu.Lock()
	defer c.mu.Unlock()
	e.b, e.err = b, err
	close(e.ready)
	if err != nil {
		delete(c.entries, key)
		return nil, err
	}
	if c.closed {
		// Close ran while we were opening; the caller still gets a usable
		// Binary that closes on Release.
		delete(c.entries, key)
		return b, nil
	}
	e.elem = c.lru.PushFront(e)
	b.acquire()
	c.evictLocked()
	return b, nil
}

// wait blocks until another Get finished opening e, then takes a reference.
// evicted reports that e left the cache before a reference could be taken.
func (c *BinaryCache) wait(e *cacheEntry) (b *Binary, evicted bool, err error) {
	<-e.ready
	if e.err != nil {
		return nil, false, e.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false, ErrCacheClosed
	}
	// Only a cached entry still holds the cache's reference, which makes
	// taking another one safe.
	if e.elem == nil {
		return nil, true, nil
	}
	c.lru.MoveToFront(e.elem)
	e.b.acquire()
	return e.b, false, nil
}

func openBinary(open func() (*os.File, error)) (*Binary, error) {
	f, err := open()
	if err != nil {
		return nil, fmt.Errorf("opening binary: %w", err)
	}
	return OpenBinary(f)
}

// evictLocked drops least recently used Binaries beyond maxEntries.
func (c *BinaryCache) evictLocked() {
	for c.lru.Len() > c.maxEntries {
		back := c.lru.Back()
		e := back.Value.(*cacheEntry)
		c.lru.Remove(back)
		delete(c.entries, e.key)
		e.elem = nil
		e.b.Close()
	}
}

// Len returns the number of cached Binaries.
func (c *BinaryCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Close drops every cached Binary; files still held by readers close on
// their Release. Later Gets fail with ErrCacheClosed.
func (c *BinaryCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for c.lru.Len() > 0 {
		front := c.lru.Front()
		e := front.Value.(*cacheEntry)
		c.lru.Remove(front)
		delete(c.entries, e.key)
		e.elem = nil
		if err := e.b.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
