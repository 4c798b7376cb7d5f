package cfi

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/lru"
)

// ErrPending is returned by a DebugFileFunc while the debug file is being
// fetched: the table is built from what the binary holds, and built again
// on a request after StoreConfig.RetryAfter.
var ErrPending = errors.New("debug file pending")

// ErrOpen is the error of a build that could not open its binary. It
// says nothing of the file: the process it was opened through may have
// exited while another still maps it. Such a build is not held, so the
// next request, with another opener, builds it again.
var ErrOpen = errors.New("opening binary")

// ErrTooLarge is the error of a table larger than the store's whole bound.
var ErrTooLarge = errors.New("unwind table larger than the store's bound")

// DebugFileFunc returns the separate debug file (.debug, with .debug_frame)
// of the binary whose GNU build ID is buildID, found where the symbolizer
// finds it: local debug directories, the download cache, debuginfod. It
// returns ErrPending when a download has started, and must not wait for
// it. The store closes the file.
type DebugFileFunc func(buildID string) (*os.File, error)

// StoreConfig configures a Store.
type StoreConfig struct {
	// MaxBytes bounds the summed size of the tables held, as measured by
	// Size.
	MaxBytes int64
	// Size measures a table for MaxBytes; nil means Table.Size, its size
	// in Go memory. A loader may count its own encoding instead.
	Size func(*Table) int64
	// QueueLen bounds the build requests waiting; more are dropped and
	// counted.
	QueueLen int
	// DebugFile finds separate debug files; nil means binaries only.
	DebugFile DebugFileFunc
	// RetryAfter is how long a table built while its debug file was
	// pending is kept before a request builds it again; 0 means 30 s.
	RetryAfter time.Duration
}

const defaultRetryAfter = 30 * time.Second

// Entry is what the store holds for a file.
type Entry struct {
	// Table is nil when the build failed.
	Table *Table
	// Err is why the build failed, or ErrPending when the table lacks
	// the .debug_frame of a debug file still being fetched.
	Err error
	// Built is when the table was built.
	Built time.Time
	// BuildTime is how long the build took.
	BuildTime time.Duration
}

// StoreStats are a store's counts since it was created.
type StoreStats struct {
	// Bytes and Tables are the size and number of entries held now.
	Bytes  int64
	Tables int
	// Evictions counts tables evicted to stay within MaxBytes.
	Evictions uint64
	// Builds and BuildErrors count builds done and builds that failed.
	Builds, BuildErrors uint64
	// BuildTime is the summed time of the builds.
	BuildTime time.Duration
	// Queued is the number of requests waiting now; Dropped counts the
	// requests refused because the queue was full.
	Queued  int
	Dropped uint64
	// Released counts tables dropped by Release once copied elsewhere.
	Released uint64
}

// failedCost is what a failed build costs in the store, so that a file
// with no CFI is not built again on every request.
const failedCost = 256

// Store builds unwind tables off the hot path, once per file identity K,
// on one worker goroutine, and holds them in an LRU bounded by bytes.
type Store[K comparable] struct {
	cfg     StoreConfig
	cache   *lru.Cache[K, *Entry]
	queue   chan request[K]
	done    chan struct{}
	wg      sync.WaitGroup
	onBuilt func(K, *Entry)

	mu       sync.Mutex
	inflight map[K]struct{}
	stats    StoreStats
}

type request[K comparable] struct {
	key  K
	open func() (*os.File, error)
}

// NewStore starts a store and its worker. onBuilt, if not nil, is called
// on the worker after each build (for example to load the table into BPF
// maps), with the entry built, which is not held when its Err is ErrOpen;
// it may call the store.
func NewStore[K comparable](cfg StoreConfig, onBuilt func(K, *Entry)) *Store[K] {
	if cfg.QueueLen < 1 {
		cfg.QueueLen = 1
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = defaultRetryAfter
	}
	if cfg.Size == nil {
		cfg.Size = (*Table).Size
	}
	s := &Store[K]{
		cfg: cfg,
		cache: lru.New[K, *Entry](cfg.MaxBytes, func(_ K, e *Entry) int64 {
			if e.Table == nil {
				return failedCost
			}
			return cfg.Size(e.Table)
		}),
		queue:    make(chan request[K], cfg.QueueLen),
		done:     make(chan struct{}),
		onBuilt:  onBuilt,
		inflight: make(map[K]struct{}),
	}
	s.wg.Add(1)
	go s.work()
	return s
}

// OnEvict sets a function called for each table evicted to make room (for
// example to unload it from BPF). It runs under the store's LRU lock and
// must not call back into the store.
func (s *Store[K]) OnEvict(fn func(K, *Entry)) {
	s.cache.OnEvict(fn)
}

// Get returns the entry held for key, marking it recently used. It never
// blocks on a build.
func (s *Store[K]) Get(key K) (*Entry, bool) {
	return s.cache.Get(key)
}

// Request asks for key's table to be built with the file open returns,
// unless it is held (and not due for a retry) or already queued. It never
// blocks: it reports false when the queue is full and the request was
// dropped.
func (s *Store[K]) Request(key K, open func() (*os.File, error)) bool {
	if e, ok := s.cache.Peek(key); ok {
		if !errors.Is(e.Err, ErrPending) || time.Since(e.Built) < s.cfg.RetryAfter {
			return true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.inflight[key]; ok {
		return true
	}
	select {
	case <-s.done:
		return false
	default:
	}
	select {
	case s.queue <- request[K]{key, open}:
		s.inflight[key] = struct{}{}
		return true
	default:
		s.stats.Dropped++
		return false
	}
}

// Release drops e, the entry held for key, once its user has copied the
// table elsewhere (the loader, into BPF maps): the Go copy then costs
// nothing, and a later Request builds the table again. An entry other
// than e (built again meanwhile) or one waiting for its debug file
// (ErrPending, retried through Get) is kept. It reports whether e was
// dropped.
func (s *Store[K]) Release(key K, e *Entry) bool {
	if e == nil || errors.Is(e.Err, ErrPending) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.cache.Peek(key); !ok || held != e {
		return false
	}
	s.cache.Remove(key)
	s.stats.Released++
	return true
}

// Stats returns the store's counts.
func (s *Store[K]) Stats() StoreStats {
	c := s.cache.Stats()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Bytes, st.Tables, st.Evictions = c.Cost, c.Len, c.Evictions
	st.Queued = len(s.inflight)
	return st
}

// Close stops the worker after the build under way; queued requests are
// dropped.
func (s *Store[K]) Close() error {
	s.mu.Lock()
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Store[K]) work() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case r := <-s.queue:
			start := time.Now()
			t, err := s.build(r.open)
			e := &Entry{Table: t, Err: err, Built: time.Now()}
			e.BuildTime = e.Built.Sub(start)
			if t != nil && s.cfg.Size(t) > s.cfg.MaxBytes {
				e.Table, e.Err = nil, fmt.Errorf("holding %d bytes: %w", s.cfg.Size(t), ErrTooLarge)
			}
			// Under mu, so that Release never drops an entry added
			// between its check and its removal.
			s.mu.Lock()
			if !errors.Is(err, ErrOpen) {
				s.cache.Add(r.key, e)
			}
			delete(s.inflight, r.key)
			s.stats.Builds++
			s.stats.BuildTime += e.BuildTime
			if e.Table == nil {
				s.stats.BuildErrors++
			}
			s.mu.Unlock()
			if s.onBuilt != nil {
				s.onBuilt(r.key, e)
			}
		}
	}
}

// build compiles the file open returns, filled from its debug file's
// .debug_frame where its own CFI covers too little.
func (s *Store[K]) build(open func() (*os.File, error)) (*Table, error) {
	f, err := open()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOpen, err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("reading ELF: %w", err)
	}
	t, err := FromELF(ef)
	if s.cfg.DebugFile == nil || (t != nil && !NeedsDebugFrame(ef, t)) {
		return t, err
	}
	id := elfbin.GNUBuildID(ef)
	if id == "" {
		return t, err
	}
	d, derr := s.debugFrame(id)
	switch {
	case derr == nil && t == nil:
		return d, nil
	case derr == nil:
		return t.Fill(d), nil
	case errors.Is(derr, ErrPending):
		return t, ErrPending // t may be nil: nothing yet
	case t != nil:
		return t, nil
	}
	return nil, err
}

func (s *Store[K]) debugFrame(buildID string) (*Table, error) {
	df, err := s.cfg.DebugFile(buildID)
	if err != nil {
		return nil, err
	}
	defer df.Close()
	ef, err := elf.NewFile(df)
	if err != nil {
		return nil, fmt.Errorf("reading debug file: %w", err)
	}
	if elfbin.GNUBuildID(ef) != buildID {
		return nil, errors.New("reading debug file: build ID mismatch")
	}
	return DebugFrame(ef)
}

// Size returns the bytes the table holds in memory.
func (t *Table) Size() int64 {
	return int64(unsafe.Sizeof(*t)) + int64(cap(t.Rows))*int64(unsafe.Sizeof(Row{}))
}
