package symbolize

import (
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize/debugcache"
	"github.com/bpfcol/bpfcol/internal/symbolize/debugfiles"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
)

// Mode is how the frames of one mapping are named.
type Mode int

// The modes a mapping is classified into.
const (
	// ModeSkip: nothing to name ([vdso], anonymous and JIT memory, or a
	// binary known to have nothing to symbolize).
	ModeSkip Mode = iota
	// ModeProcess: the mapped binary has .symtab, DWARF or .gopclntab, or a
	// .gnu_debuglink that resolves locally.
	ModeProcess
	// ModeFile: the binary is stripped; its GNU build-id leads to a
	// separate debug file, local or fetched.
	ModeFile
)

// String names the mode in logs and errors.
func (m Mode) String() string {
	switch m {
	case ModeSkip:
		return "skip"
	case ModeProcess:
		return "process"
	case ModeFile:
		return "file"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Status says how a lookup ended.
type Status int

// Lookup outcomes.
const (
	// Resolved: Frames names the address.
	Resolved Status = iota
	// Pending: the debug info is being fetched; the frame goes out with its
	// build-id and address, and a later lookup names it.
	Pending
	// Unresolved: nothing names the address.
	Unresolved
	// Unmapped: the file offset is outside every executable segment.
	Unmapped
)

// SymbolizerConfig configures a Symbolizer. Zero fields take defaults.
type SymbolizerConfig struct {
	// DebugDirectories are searched for DIR/.build-id/NN/REST.debug and
	// for .gnu_debuglink targets, after SystemDebugDir.
	DebugDirectories []string
	// SystemDebugDir is searched first; default /usr/lib/debug.
	SystemDebugDir string
	// CacheDir holds fetched debug files; "" disables fetching.
	CacheDir string
	// CacheMaxSize bounds CacheDir in bytes; default 2 GiB.
	CacheMaxSize int64
	// MaxSpillBytes bounds the disk under CacheDir that compressed debug
	// sections take once decompressed, which are then mapped instead of
	// held in the heap; default DefaultMaxSpillBytes, negative keeps them
	// in the heap. Without CacheDir they are in the heap.
	MaxSpillBytes int64
	// Debuginfod configures fetching. Zero fields come from the
	// DEBUGINFOD_* environment.
	Debuginfod debuginfod.Config
	// Tables holds the parsed symbol tables of the debug files the
	// Symbolizer opens: the receiver shares one with the BinaryCache of
	// the binaries it names, under one bound. Nil gives the Symbolizer a
	// cache of its own, of MaxTableBytes. With a CacheDir, every Binary
	// holding its tables here decompresses its compressed sections to
	// the Symbolizer's section spill under it, while the Symbolizer is
	// open.
	Tables *Tables
	// MaxTableBytes bounds the Symbolizer's own table cache when Tables
	// is nil; default DefaultMaxTableBytes.
	MaxTableBytes int64
	// NegativeTTL is how long failed fetches, bad debug files and
	// binaries with nothing to symbolize are remembered; default 10 min.
	NegativeTTL time.Duration
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
	// Logger gets a warning when a fetch fails for another reason than
	// every server not having the file (unreachable, timed out, a body
	// that is not the file, too large), at most one per ten
	// minutes; default none.
	Logger *zap.Logger
}

// Defaults of SymbolizerConfig.
const (
	DefaultCacheMaxSize  = 2 << 30
	DefaultMaxTableBytes = 16 << 20
	DefaultNegativeTTL   = 10 * time.Minute
	// maxNegativeEntries bounds each negative cache.
	maxNegativeEntries = 4096
	// maxDebugFileBytes bounds the debug files held open by their own
	// heap (headers, Binary.MemSize), a few hundred files; their parsed
	// tables are in the table cache.
	maxDebugFileBytes = 2 << 20
	// maxClassified bounds the per-binary classification memo.
	maxClassified = 4096
)

// SymbolizerStats counts outcomes since the Symbolizer was created.
type SymbolizerStats struct {
	// Classified counts binaries per mode chosen.
	ModeSkip, ModeProcess, ModeFile int64
	// LocalHits counts debug files found on disk (system dir, configured
	// directories, the cache, or through .gnu_debuglink).
	LocalHits int64
	// Fetches, FetchFailures and FetchBytes count debuginfod downloads.
	Fetches, FetchFailures, FetchBytes int64
	// ParseFailures counts debug files that failed validation or parsing,
	// downloads that were not the requested file, and links or foreign
	// files removed from the cache.
	ParseFailures int64
	// NegativeHits counts lookups answered by a negative cache.
	NegativeHits int64
	// Pending counts lookups answered while the debug info was on its way.
	Pending int64
	// Unmapped counts file offsets outside every executable segment.
	Unmapped int64
	// Tables counts the debug files held open; TableBytes is the heap
	// of the parsed symbol tables in SymbolizerConfig.Tables.
	Tables, TableBytes int64
}

// CacheStats are the size, hits and evictions of each of a Symbolizer's
// in-memory caches, for publishing as metrics.
type CacheStats struct {
	// Tables holds the process's parsed symbol tables; its cost is in
	// bytes.
	Tables lru.Stats
	// Classified holds the mode chosen per binary.
	Classified lru.Stats
	// NothingToSymbolize holds binaries with nothing to name.
	NothingToSymbolize lru.Stats
	// BadDebugFiles holds debug files that failed to parse.
	BadDebugFiles lru.Stats
	// FailedFetches holds build-ids whose fetch failed recently.
	FailedFetches lru.Stats
}

// MappingRef names the mapping a binary was opened from.
type MappingRef struct {
	// PID is the process mapping the binary; its root resolves paths.
	PID int
	// Path is the mapping's path as /proc/PID/maps shows it.
	Path string
	// Key is the binary's device and inode.
	Key process.FileKey
}

// Lookup is the answer for one address.
type Lookup struct {
	Frames []frame.Line
	// VAddr is the ELF virtual address looked up.
	VAddr  uint64
	Mode   Mode
	Status Status
}

// Symbolizer classifies mappings and names addresses, in the binary itself
// (process mode) or in a separate debug file found by build-id (file mode).
// Safe for concurrent use.
type Symbolizer struct {
	cfg   SymbolizerConfig
	files *debugfiles.Finder
	spill *sectionSpill // held until Close; nil without a cache dir

	classified *lru.Cache[process.FileKey, *classification]
	nothing    *negcache.Files // binaries with nothing to symbolize
	badDebug   *negcache.Files // debug files that failed to parse
	tables     *debugTables
	closed     atomic.Bool

	stats struct {
		modeSkip, modeProcess, modeFile        atomic.Int64
		localHits, parseFailures, negativeHits atomic.Int64
		pending, unmapped                      atomic.Int64
	}
}

// CacheDirError is NewSymbolizer's error when SymbolizerConfig.CacheDir
// cannot be used (a link, another user's, not writable). Without a CacheDir
// a Symbolizer still reads the debug files on the host; only fetching and
// caching need one.
type CacheDirError struct{ Err error }

func (e *CacheDirError) Error() string { return e.Err.Error() }
func (e *CacheDirError) Unwrap() error { return e.Err }

// NewSymbolizer returns a Symbolizer for cfg. An unusable cfg.CacheDir is
// a *CacheDirError.
func NewSymbolizer(cfg SymbolizerConfig) (*Symbolizer, error) {
	if cfg.SystemDebugDir == "" {
		cfg.SystemDebugDir = "/usr/lib/debug"
	}
	if cfg.CacheMaxSize == 0 {
		cfg.CacheMaxSize = DefaultCacheMaxSize
	}
	if cfg.MaxTableBytes <= 0 {
		cfg.MaxTableBytes = DefaultMaxTableBytes
	}
	if cfg.Tables == nil {
		cfg.Tables = NewTables(cfg.MaxTableBytes)
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = DefaultNegativeTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	dcfg, err := debuginfod.ConfigFromEnv(cfg.Debuginfod, cfg.Getenv)
	if err != nil {
		return nil, fmt.Errorf("configuring debuginfod: %w", err)
	}
	s := &Symbolizer{
		cfg:        cfg,
		classified: lru.New[process.FileKey, *classification](maxClassified, nil),
		nothing:    negcache.NewFiles(cfg.NegativeTTL, maxNegativeEntries),
		badDebug:   negcache.NewFiles(cfg.NegativeTTL, maxNegativeEntries),
		tables:     newDebugTables(maxDebugFileBytes),
	}
	var cache *debugcache.Cache
	if cfg.CacheDir != "" {
		if cache, err = debugcache.Open(cfg.CacheDir, cfg.CacheMaxSize); err != nil {
			return nil, &CacheDirError{Err: err}
		}
		if cfg.MaxSpillBytes == 0 {
			cfg.MaxSpillBytes = DefaultMaxSpillBytes
		}
		if cfg.MaxSpillBytes > 0 {
			if s.spill, err = acquireSectionSpill(cfg.CacheDir, cfg.MaxSpillBytes); err != nil {
				cache.Close()
				return nil, &CacheDirError{Err: err}
			}
			cfg.Tables.spill.Store(s.spill)
		}
	}
	s.files = debugfiles.New(debugfiles.Config{
		SystemDebugDir:   cfg.SystemDebugDir,
		DebugDirectories: cfg.DebugDirectories,
		NegativeTTL:      cfg.NegativeTTL,
		Logger:           cfg.Logger,
	}, debuginfod.New(dcfg), cache)
	// Each copy of a binary is a new file: the classifications of files
	// no process maps any more go after a while, not at 4096 entries.
	s.classified.SetMaxIdle(binaryMaxIdle)
	return s, nil
}

// Close stops the fetches in flight and closes the debug files held.
// Calling it more than once is harmless.
func (s *Symbolizer) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.files.Close()
	// The debug files close first: their spilled sections are removed
	// through the spill's directory.
	err := s.tables.closeAll()
	if s.spill != nil {
		s.cfg.Tables.spill.CompareAndSwap(s.spill, nil)
		s.spill.release()
	}
	return err
}

// Stats returns a snapshot of the counters.
func (s *Symbolizer) Stats() SymbolizerStats {
	fs := s.files.Stats()
	tables := s.tables.stats()
	return SymbolizerStats{
		ModeSkip:      s.stats.modeSkip.Load(),
		ModeProcess:   s.stats.modeProcess.Load(),
		ModeFile:      s.stats.modeFile.Load(),
		LocalHits:     s.stats.localHits.Load(),
		Fetches:       fs.Fetches,
		FetchFailures: fs.FetchFailures,
		FetchBytes:    fs.FetchBytes,
		ParseFailures: s.stats.parseFailures.Load() + fs.InvalidDownloads + s.files.CacheCorrupt(),
		NegativeHits:  s.stats.negativeHits.Load() + fs.NegativeHits,
		Pending:       s.stats.pending.Load(),
		Unmapped:      s.stats.unmapped.Load(),
		Tables:        int64(tables.Len),
		TableBytes:    s.cfg.Tables.Stats().Cost,
	}
}

// CacheStats returns the size, hits and evictions of the in-memory caches.
func (s *Symbolizer) CacheStats() CacheStats {
	return CacheStats{
		Tables:             s.cfg.Tables.Stats(),
		Classified:         s.classified.Stats(),
		NothingToSymbolize: s.nothing.Stats(),
		BadDebugFiles:      s.badDebug.Stats(),
		FailedFetches:      s.files.FailedFetches(),
	}
}

// Symbolize names the address at fileOffset (addr - start + pgoff) of a
// mapping of bin. The caller has already turned a return address into an
// address inside the call (frame.AtReturnAddress): nothing is adjusted here.
func (s *Symbolizer) Symbolize(ref MappingRef, bin *Binary, fileOffset uint64) Lookup {
	vaddr, ok := bin.Mapper().FileOffsetToVirtualAddress(fileOffset)
	if !ok {
		s.stats.unmapped.Add(1)
		return Lookup{Status: Unmapped}
	}
	l := Lookup{VAddr: vaddr, Status: Unresolved}
	if SkipPath(ref.Path) {
		return l
	}
	c := s.classify(ref, bin)
	l.Mode = c.mode
	switch c.mode {
	case ModeSkip:
		return l
	case ModeProcess:
		answer := bin
		if c.debugKey != "" {
			if dbg := s.tables.get(c.debugKey); dbg != nil {
				defer dbg.Release()
				answer = dbg
			}
		}
		if frames, ok := answer.Symbolize(vaddr); ok {
			l.Frames, l.Status = frames, Resolved
		} else if answer != bin {
			if frames, ok := bin.Symbolize(vaddr); ok {
				l.Frames, l.Status = frames, Resolved
			}
		}
		return l
	}
	dbg, pending := s.debugFile(c.debugKey)
	if dbg != nil {
		defer dbg.Release()
		if frames, ok := dbg.Symbolize(vaddr); ok {
			l.Frames, l.Status = frames, Resolved
			return l
		}
	}
	if pending {
		s.stats.pending.Add(1)
		l.Status = Pending
		return l
	}
	// Whatever .dynsym knows.
	if frames, ok := bin.Symbolize(vaddr); ok {
		l.Frames, l.Status = frames, Resolved
	}
	return l
}
