// Package debugfiles finds the separate debug files of binaries: by GNU
// build id in the system debug directory, the configured directories and
// the download cache, fetched from debuginfod in the background when none
// is there; by .gnu_debuglink in gdb's order. Every path is opened beneath
// the directory it belongs to: no link planted there leads elsewhere.
package debugfiles

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/internal/symbolize/buildid"
	"github.com/bpfcol/bpfcol/internal/symbolize/debugcache"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
)

// ErrNoDebugFile means no debug file of a build ID is on disk and none is
// being fetched.
var ErrNoDebugFile = errors.New("no debug file")

const (
	// maxNegativeEntries bounds each negative cache.
	maxNegativeEntries = 4096
	// localRecheck is how soon the local directories are searched again
	// for a debug file they did not have: one installed meanwhile (a -dbg
	// package) is found that much later. A fetched one is found at once.
	localRecheck = 30 * time.Second
	// fetchFailureLogInterval spaces the warnings about failed fetches:
	// a misconfigured server fails every fetch, and the metrics count
	// them all.
	fetchFailureLogInterval = 10 * time.Minute
)

// Config says where debug files are looked for.
type Config struct {
	// SystemDebugDir is the system's debug directory (/usr/lib/debug).
	SystemDebugDir string
	// DebugDirectories are more directories laid out as SystemDebugDir.
	DebugDirectories []string
	// NegativeTTL is how long a failed fetch is remembered.
	NegativeTTL time.Duration
	// Logger gets a warning when a fetch fails for another reason than
	// every server not having the file, at most one per
	// fetchFailureLogInterval.
	Logger *zap.Logger
}

// Stats counts the fetches since the Finder was created.
type Stats struct {
	Fetches, FetchFailures, FetchBytes int64
	// InvalidDownloads counts downloads that were not the debug file
	// asked for.
	InvalidDownloads int64
	// NegativeHits counts fetches not started because one failed lately.
	NegativeHits int64
}

// Finder finds debug files. Its methods are safe for concurrent use.
type Finder struct {
	cfg    Config
	client *debuginfod.Client
	cache  *debugcache.Cache // nil: nothing fetched nor cached
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	failedFetch *negcache.Cache[string, string] // build-ids whose fetch failed
	// noLocal holds the build-ids no local directory had a debug file
	// for a moment ago: each new address of a stripped binary would look
	// for it again, a few opens each.
	noLocal *negcache.Cache[string, string]

	mu      sync.Mutex
	pending map[string]bool // build-ids being fetched
	closed  bool
	// fetchLoggedAt is when a failed fetch was last logged; fetchUnlogged
	// counts the failures since that were not.
	fetchLoggedAt time.Time
	fetchUnlogged int

	stats struct {
		fetches, fetchFailures, fetchBytes, invalid, negativeHits atomic.Int64
	}
}

// New returns a Finder over cfg's directories, fetching with client into
// cache (nil: no fetching, no cache), which it closes on Close.
func New(cfg Config, client *debuginfod.Client, cache *debugcache.Cache) *Finder {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	f := &Finder{
		cfg:         cfg,
		client:      client,
		cache:       cache,
		failedFetch: negcache.NewKeys[string](cfg.NegativeTTL, maxNegativeEntries),
		noLocal:     negcache.NewKeys[string](localRecheck, maxNegativeEntries),
		pending:     map[string]bool{},
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f
}

// Close stops the fetches in flight and closes the cache.
func (f *Finder) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
	if f.cache != nil {
		f.cache.Close()
	}
}

// Open opens the debug file of buildID on disk. When none is there, it
// starts a background fetch (if configured) and reports pending; a later
// call finds the download. The caller checks the file's build ID and
// closes it.
func (f *Finder) Open(buildID string) (file *os.File, pending bool, err error) {
	if file, err := f.OpenLocal(buildID); file != nil || err != nil {
		return file, false, err
	}
	if f.Fetch(buildID) {
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("opening debug file of %s: %w", buildID, ErrNoDebugFile)
}

// OpenLocal returns the first regular debug file of buildID on disk, nil
// (and no error) when there is none.
func (f *Finder) OpenLocal(buildID string) (*os.File, error) {
	if !buildid.Valid(buildID) {
		return nil, fmt.Errorf("opening debug file of %q: %w", buildID, debuginfod.ErrInvalidBuildID)
	}
	for file := range f.Local(buildID) {
		return file, nil
	}
	return nil, nil
}

// MayArrive reports whether a debug file missing on disk can land in the
// cache later, fetched.
func (f *Finder) MayArrive() bool { return f.cache != nil && f.client.Enabled() }

// Local yields the regular files of buildID's local candidates, opened,
// in order: the system directory, the configured ones, the cache. The
// loop's body owns each file it is given. None is yielded for a while
// after NoneLocal said none would do.
func (f *Finder) Local(buildID string) iter.Seq[*os.File] {
	return func(yield func(*os.File) bool) {
		if f.noLocal.Contains(buildID) {
			return
		}
		for _, p := range f.localCandidates(buildID) {
			file, err := f.openLocal(p)
			if err != nil {
				continue
			}
			if fi, err := file.Stat(); err != nil || !fi.Mode().IsRegular() {
				file.Close()
				continue
			}
			if !yield(file) {
				return
			}
		}
	}
}

// NoneLocal remembers that no local file of buildID would do, until the
// recheck (30 s) or a fetch of it.
func (f *Finder) NoneLocal(buildID string) { f.noLocal.Add(buildID) }

// Recheck forgets NoneLocal's verdict on buildID: the next lookup
// searches the directories again.
func (f *Finder) Recheck(buildID string) { f.noLocal.Remove(buildID) }

// Stats returns a snapshot of the counters.
func (f *Finder) Stats() Stats {
	return Stats{
		Fetches:          f.stats.fetches.Load(),
		FetchFailures:    f.stats.fetchFailures.Load(),
		FetchBytes:       f.stats.fetchBytes.Load(),
		InvalidDownloads: f.stats.invalid.Load(),
		NegativeHits:     f.stats.negativeHits.Load(),
	}
}

// FailedFetches returns the size, hits and evictions of the cache of
// failed fetches.
func (f *Finder) FailedFetches() lru.Stats { return f.failedFetch.Stats() }
