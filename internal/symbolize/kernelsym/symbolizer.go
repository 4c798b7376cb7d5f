package kernelsym

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/ksymprog"
	"github.com/bpfcol/bpfcol/internal/lru"
)

// Paths a Symbolizer resolves through, as Path reports them.
const (
	PathBPF      = "bpf"
	PathKallsyms = "kallsyms"
)

// DefaultCacheEntries bounds the result cache when Options leaves it 0.
const DefaultCacheEntries = 65536

// Options configure a Symbolizer.
type Options struct {
	// Logger receives the one warning that explains a fallback to
	// /proc/kallsyms. Nil discards it.
	Logger *zap.Logger
	// CacheEntries bounds the result cache; 0 means DefaultCacheEntries and
	// a negative value disables the cache.
	CacheEntries int
	// OpenKallsyms opens /proc/kallsyms on the fallback path; nil opens the
	// real file. The BPF path never calls it.
	OpenKallsyms func() (io.ReadCloser, error)
}

// Stats count what a Symbolizer did, for metrics.
type Stats struct {
	// Cache is the result cache's size, hits, misses and evictions.
	Cache lru.Stats
}

// formatter is the BPF program's interface, so tests can make it fail.
type formatter interface {
	Format(addrs []uint64, isReturn []bool, visit func(i int, text []byte, truncated bool)) error
	TextBounds() (stext, etext uint64, err error)
	Close() error
}

// Symbolizer names kernel addresses, through BPF when it can load and
// through /proc/kallsyms otherwise. It is safe for concurrent use.
type Symbolizer struct {
	mu        sync.Mutex
	path      string
	formatter formatter       // PathBPF
	kallsyms  *kallsymsSource // PathKallsyms
	cache     *resultCache
	pending   []int // indexes of cache misses, reused between calls
	missAddrs []uint64
	missRet   []bool
}

// New loads the BPF formatter, or falls back to /proc/kallsyms and logs the
// reason once. The fallback reads the file only at the first Symbolize.
func New(opts Options) (*Symbolizer, error) {
	return newSymbolizer(opts, func() (formatter, error) { return ksymprog.Load() })
}

func newSymbolizer(opts Options, load func() (formatter, error)) (*Symbolizer, error) {
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	entries := opts.CacheEntries
	if entries == 0 {
		entries = DefaultCacheEntries
	}
	s := &Symbolizer{}
	f, err := load()
	if err == nil {
		s.path, s.formatter = PathBPF, f
		s.cache = newResultCache(entries, coreText(runtime.GOARCH, f))
		return s, nil
	}
	s.cache = newResultCache(entries, coreText(runtime.GOARCH, nil))
	open := opts.OpenKallsyms
	if open == nil {
		open = func() (io.ReadCloser, error) { return os.Open("/proc/kallsyms") }
	}
	logger.Warn("kernel symbols: the BPF formatter cannot load, reading /proc/kallsyms instead", zap.Error(err))
	s.path = PathKallsyms
	s.kallsyms = newKallsymsSource(open)
	return s, nil
}

// Path returns PathBPF or PathKallsyms.
func (s *Symbolizer) Path() string { return s.path }

// Stats returns the counters so far.
func (s *Symbolizer) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Cache: s.cache.entries.Stats()}
}

// Symbolize names addrs[i]: as a return address when isReturn[i] (the
// symbol holding addrs[i]-1, like the kernel's %pB), else as the sampled PC
// (%pS). Result i belongs to addrs[i]; OK is false where the kernel knows no
// symbol.
func (s *Symbolizer) Symbolize(addrs []uint64, isReturn []bool) ([]Symbol, error) {
	if len(isReturn) != len(addrs) {
		return nil, fmt.Errorf("symbolizing kernel addresses: %d return flags for %d addresses", len(isReturn), len(addrs))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.formatter == nil && s.kallsyms == nil {
		return nil, fmt.Errorf("symbolizing kernel addresses: %w", os.ErrClosed)
	}
	out := make([]Symbol, len(addrs))
	if s.path == PathKallsyms {
		if err := s.kallsyms.lookup(addrs, isReturn, out); err != nil {
			return nil, err
		}
		return out, nil
	}

	s.pending, s.missAddrs, s.missRet = s.pending[:0], s.missAddrs[:0], s.missRet[:0]
	for i, a := range addrs {
		if sym, ok := s.cache.get(resultKey{a, isReturn[i]}); ok {
			out[i] = sym
			continue
		}
		s.pending = append(s.pending, i)
		s.missAddrs = append(s.missAddrs, a)
		s.missRet = append(s.missRet, isReturn[i])
	}
	if len(s.pending) == 0 {
		return out, nil
	}
	err := s.formatter.Format(s.missAddrs, s.missRet, func(j int, text []byte, truncated bool) {
		sym := parseKernelText(text, truncated)
		out[s.pending[j]] = sym
		s.cache.put(resultKey{s.missAddrs[j], s.missRet[j]}, sym)
	})
	if err != nil {
		return nil, fmt.Errorf("symbolizing kernel addresses: %w", err)
	}
	return out, nil
}

// Close unloads the BPF formatter and drops the kallsyms snapshot.
func (s *Symbolizer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kallsyms = nil
	if s.formatter == nil {
		return nil
	}
	err := s.formatter.Close()
	s.formatter = nil
	return err
}
