package symbolize

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

// ErrCacheClosed is returned by BinaryCache.Get after Close.
var ErrCacheClosed = errors.New("binary cache is closed")

// opening is a key being opened by one Get; ready is closed once the
// attempt finished, and err is immutable afterwards.
type opening struct {
	ready chan struct{}
	err   error
}

// BinaryCache is a bounded LRU of opened Binaries keyed by device and inode.
// Each key is opened at most once at a time: concurrent Gets for a key being
// opened wait for that open. Failed opens are not cached. Evicting a Binary
// gives up the cache's reference, so its file is closed once the last
// reader released it. Safe for concurrent use.
type BinaryCache struct {
	mu      sync.Mutex // a lookup and the reference it takes are one step
	held    *lru.Cache[process.FileKey, *Binary]
	opening map[process.FileKey]*opening
	closed  bool
}

// NewBinaryCache returns a cache holding at most maxEntries Binaries
// (at least 1).
func NewBinaryCache(maxEntries int) *BinaryCache {
	c := &BinaryCache{
		held:    lru.New[process.FileKey, *Binary](int64(max(maxEntries, 1)), nil),
		opening: make(map[process.FileKey]*opening),
	}
	// Called under c.mu, from Add: no reader can be taking a reference.
	c.held.OnEvict(func(_ process.FileKey, b *Binary) { b.Close() })
	return c
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
	if b, ok := c.held.Get(key); ok {
		b.acquire()
		c.mu.Unlock()
		return b, nil
	}
	if o, ok := c.opening[key]; ok {
		c.mu.Unlock()
		<-o.ready
		if o.err != nil {
			return nil, o.err
		}
		// Held now, or evicted (or closed) since its open finished: Get
		// again takes a reference, opens it again, or fails.
		return c.Get(key, open)
	}
	o := &opening{ready: make(chan struct{})}
	c.opening[key] = o
	c.mu.Unlock()

	b, err := openBinary(open)

	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.opening, key)
	o.err = err
	close(o.ready)
	if err != nil {
		return nil, err
	}
	if c.closed {
		// Close ran while we were opening; the caller still gets a usable
		// Binary that closes on Release.
		return b, nil
	}
	b.acquire()
	c.held.Add(key, b)
	return b, nil
}

func openBinary(open func() (*os.File, error)) (*Binary, error) {
	f, err := open()
	if err != nil {
		return nil, fmt.Errorf("opening binary: %w", err)
	}
	return OpenBinary(f)
}

// Len returns the number of cached Binaries.
func (c *BinaryCache) Len() int { return c.held.Len() }

// Stats returns the size, hits and evictions of the cache.
func (c *BinaryCache) Stats() lru.Stats { return c.held.Stats() }

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
	c.held.RemoveFunc(func(_ process.FileKey, b *Binary) bool {
		if err := b.Close(); err != nil {
			errs = append(errs, err)
		}
		return true
	})
	return errors.Join(errs...)
}
