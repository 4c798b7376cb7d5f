package symbolize

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

// ErrCacheClosed is returned by BinaryCache.Get after Close.
var ErrCacheClosed = errors.New("binary cache is closed")

// DefaultMaxBinaryBytes is the bound of a BinaryCache on the heap of the
// Binaries it holds when NewBinaryCache is given none.
const DefaultMaxBinaryBytes = 4 << 20

// binaryMaxIdle is how long a Binary, or a file's entry of the index,
// stays cached unused.
const binaryMaxIdle = lru.ChurnIdle

// opening is a key being opened by one Get; ready is closed once the
// attempt finished, and err is immutable afterwards.
type opening struct {
	ready chan struct{}
	err   error
}

// contentKey names what a file holds. A binary with a build id is named by
// it and its size, so that copies of one build (a deployment's new file,
// a container's layer) share one Binary: its headers, its mapping and the
// tables parsed from it. A binary without one is named by its file.
//
// Sharing trusts the build id, as finding debug files by it (.debug
// directories, debuginfod) already does: a file made to carry another
// binary's build id and size gets that binary's names, or gives it its
// own when it was opened first. What a Binary answers only names frames
// (and, in the leaf analysis, picks between two slots of the sampled
// process's own stack); nothing here drives the BPF unwinder, whose CFI
// tables are built per file (internal/unwind/loader).
type contentKey struct {
	buildID string // the GNU build id, else the Go build id
	size    int64
	file    process.FileKey // when there is no build id
}

func contentOf(key process.FileKey, b *Binary) contentKey {
	id := b.f.IDs.GNU
	if id == "" {
		id = b.f.IDs.Go
	}
	if id == "" {
		return contentKey{file: key}
	}
	// The size comes from the mapping, or the file when it is not mapped.
	size := int64(len(b.f.Data))
	if b.f.Data == nil {
		fi, err := b.f.OS.Stat()
		if err != nil {
			return contentKey{file: key}
		}
		size = fi.Size()
	}
	return contentKey{buildID: id, size: size}
}

// fileEntryCost is what an entry of the file index holds: its key, its
// content key (the build id string shared with the Binary's) and the
// LRU's element and map slot.
const fileEntryCost = int64(unsafe.Sizeof(process.FileKey{})+unsafe.Sizeof(contentKey{})) + 128

// BinaryCache is a bounded LRU of opened Binaries. Files are keyed by
// device and inode; files holding the same build (contentKey) share one
// Binary, so a hundredth copy of a binary costs an entry of the file
// index, not another parse. Each key is opened at most once at a time:
// concurrent Gets for a key being opened wait for that open. Failed opens
// are not cached. Evicting a Binary gives up the cache's reference, so its
// file is closed once the last reader released it. Safe for concurrent
// use.
type BinaryCache struct {
	mu sync.Mutex // a lookup and the reference it takes are one step
	// held are the Binaries by content, bounded by their heap
	// (Binary.MemSize) and count.
	held *lru.Cache[contentKey, *Binary]
	// files says which content each file holds; an entry whose Binary was
	// evicted opens the file again.
	files   *lru.Cache[process.FileKey, contentKey]
	opening map[process.FileKey]*opening
	closed  bool
	tables  *Tables // the Binaries' parsed tables
}

// NewBinaryCache returns a cache holding at most maxBinaries distinct
// Binaries (at least 1) whose own heap (Binary.MemSize, measured when
// added) sums to at most maxBytes (DefaultMaxBinaryBytes when 0 or less).
// Each Binary is counted as at least maxBytes/maxBinaries, which keeps the
// count bound: it also holds a file descriptor and a mapping. The index of
// files holds up to 2 files per Binary: a file evicted from it while its
// Binary stays is found again by one open of its headers. The Binaries'
// parsed tables are held in tables.
func NewBinaryCache(maxBinaries int, maxBytes int64, tables *Tables) *BinaryCache {
	maxBinaries = max(maxBinaries, 1)
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBinaryBytes
	}
	least := max(maxBytes/int64(maxBinaries), 1)
	c := &BinaryCache{
		held: lru.New(maxBytes, func(_ contentKey, b *Binary) int64 {
			return max(b.MemSize(), least)
		}),
		files:   lru.New[process.FileKey, contentKey](2*int64(maxBinaries)*fileEntryCost, func(process.FileKey, contentKey) int64 { return fileEntryCost }),
		opening: make(map[process.FileKey]*opening),
		tables:  tables,
	}
	// Called under c.mu, from Add: no reader can be taking a reference.
	c.held.OnEvict(func(_ contentKey, b *Binary) { b.Close() })
	// Files of processes gone (each copy of a binary is a new file), and
	// Binaries no process samples any more, go after a while instead of
	// when the bounds are reached.
	c.held.SetMaxIdle(binaryMaxIdle)
	c.files.SetMaxIdle(binaryMaxIdle)
	return c
}

// Get returns the Binary for key, calling open and OpenBinary on a miss.
// The caller holds a reference and must call Release on the Binary when
// done with it (never Close: that reference belongs to the cache). The
// Binary may have been opened from another file with the same build id
// and size.
func (c *BinaryCache) Get(key process.FileKey, open func() (*os.File, error)) (*Binary, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrCacheClosed
	}
	if ck, ok := c.files.Get(key); ok {
		if b, ok := c.held.Get(ck); ok {
			b.acquire()
			c.mu.Unlock()
			return b, nil
		}
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

	b, err := openBinary(open, c.tables)

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
	ck := contentOf(key, b)
	c.files.Add(key, ck)
	if held, ok := c.held.Get(ck); ok {
		// Another copy of the build: share what it parsed. b parsed
		// nothing yet, so closing it drops headers only.
		held.acquire()
		b.Close()
		return held, nil
	}
	b.acquire()
	c.held.Add(ck, b)
	return b, nil
}

func openBinary(open func() (*os.File, error), tables *Tables) (*Binary, error) {
	f, err := open()
	if err != nil {
		return nil, fmt.Errorf("opening binary: %w", err)
	}
	return OpenBinary(f, tables)
}

// ID returns a number naming b in the process. Copies of one build shared
// through a BinaryCache are one Binary, with one ID: a cache of what was
// derived from a Binary's content can key it by ID.
func (b *Binary) ID() uint64 { return b.id }

// Len returns the number of cached Binaries.
func (c *BinaryCache) Len() int { return c.held.Len() }

// Stats returns the size, hits and evictions of the cache of Binaries;
// Cost is in bytes of heap, each Binary counted as at least its share of
// the count bound.
func (c *BinaryCache) Stats() lru.Stats { return c.held.Stats() }

// FileStats returns the size, hits and evictions of the index of files;
// Cost is in bytes of heap.
func (c *BinaryCache) FileStats() lru.Stats { return c.files.Stats() }

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
	c.held.RemoveFunc(func(_ contentKey, b *Binary) bool {
		if err := b.Close(); err != nil {
			errs = append(errs, err)
		}
		return true
	})
	c.files.Purge()
	return errors.Join(errs...)
}
