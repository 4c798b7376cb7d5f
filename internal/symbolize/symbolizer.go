package symbolize

import (
	"container/list"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/internal/symbolize/buildid"
	"github.com/bpfcol/bpfcol/internal/symbolize/debugcache"
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
	// Debuginfod configures fetching. Zero fields come from the
	// DEBUGINFOD_* environment.
	Debuginfod debuginfod.Config
	// MaxTableBytes bounds the parsed debug tables kept in memory;
	// default 512 MiB.
	MaxTableBytes int64
	// NegativeTTL is how long failed fetches, bad debug files and
	// binaries with nothing to symbolize are remembered; default 10 min.
	NegativeTTL time.Duration
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
}

// Defaults of SymbolizerConfig.
const (
	DefaultCacheMaxSize  = 2 << 30
	DefaultMaxTableBytes = 512 << 20
	DefaultNegativeTTL   = 10 * time.Minute
	// maxNegativeEntries bounds each negative cache.
	maxNegativeEntries = 4096
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
	// Tables and TableBytes describe the parsed debug files held.
	Tables, TableBytes int64
}

// MappingRef names the mapping a binary was opened from.
type MappingRef struct {
	// PID is the process mapping the binary; its root resolves paths.
	PID int
	// Path is the mapping's path as /proc/PID/maps shows it.
	Path string
	// Key is the binary's device and inode.
	Key FileKey
}

// Lookup is the answer for one address.
type Lookup struct {
	Frames []Frame
	// VAddr is the ELF virtual address looked up.
	VAddr  uint64
	Mode   Mode
	Status Status
}

// Symbolizer classifies mappings and names addresses, in the binary itself
// (process mode) or in a separate debug file found by build-id (file mode).
// Safe for concurrent use.
type Symbolizer struct {
	cfg    SymbolizerConfig
	client *debuginfod.Client
	cache  *debugcache.Cache
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	nothing  *negcache.Cache // binaries with nothing to symbolize
	badDebug *negcache.Cache // debug files that failed to parse

	mu          sync.Mutex
	classified  map[FileKey]*classification
	tables      *tableLRU
	pending     map[string]bool      // build-ids being fetched
	failedFetch map[string]time.Time // build-id → retry after
	closed      bool

	stats struct {
		modeSkip, modeProcess, modeFile              atomic.Int64
		localHits, fetches, fetchFailures, fetchByte atomic.Int64
		parseFailures, negativeHits, pending         atomic.Int64
		unmapped                                     atomic.Int64
	}
}

type classification struct {
	mode Mode
	// debugKey names the debug file in tables: the build-id in file mode,
	// or the .gnu_debuglink target in process mode ("" when the binary
	// answers itself).
	debugKey string
}

// NewSymbolizer returns a Symbolizer for cfg.
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
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = DefaultNegativeTTL
	}
	dcfg, err := debuginfod.ConfigFromEnv(cfg.Debuginfod, cfg.Getenv)
	if err != nil {
		return nil, fmt.Errorf("configuring debuginfod: %w", err)
	}
	s := &Symbolizer{
		cfg:         cfg,
		client:      debuginfod.New(dcfg),
		nothing:     negcache.New(cfg.NegativeTTL, maxNegativeEntries),
		badDebug:    negcache.New(cfg.NegativeTTL, maxNegativeEntries),
		classified:  map[FileKey]*classification{},
		tables:      newTableLRU(cfg.MaxTableBytes),
		pending:     map[string]bool{},
		failedFetch: map[string]time.Time{},
	}
	if cfg.CacheDir != "" {
		if s.cache, err = debugcache.Open(cfg.CacheDir, cfg.CacheMaxSize); err != nil {
			return nil, err
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the fetches in flight and closes the debug files held.
func (s *Symbolizer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	if s.cache != nil {
		s.cache.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tables.closeAll()
}

// Stats returns a snapshot of the counters.
func (s *Symbolizer) Stats() SymbolizerStats {
	s.mu.Lock()
	tables, bytes := int64(s.tables.lru.Len()), s.tables.bytes
	s.mu.Unlock()
	return SymbolizerStats{
		ModeSkip:      s.stats.modeSkip.Load(),
		ModeProcess:   s.stats.modeProcess.Load(),
		ModeFile:      s.stats.modeFile.Load(),
		LocalHits:     s.stats.localHits.Load(),
		Fetches:       s.stats.fetches.Load(),
		FetchFailures: s.stats.fetchFailures.Load(),
		FetchBytes:    s.stats.fetchByte.Load(),
		ParseFailures: s.stats.parseFailures.Load() + s.cacheCorrupt(),
		NegativeHits:  s.stats.negativeHits.Load(),
		Pending:       s.stats.pending.Load(),
		Unmapped:      s.stats.unmapped.Load(),
		Tables:        tables,
		TableBytes:    bytes,
	}
}

// SkipPath reports whether a mapping path never holds anything to name:
// the kernel's [vdso]/[vsyscall]/[vvar], anonymous memory, and JIT code
// (memfd, anonymous named regions, perf-PID.map style JIT dumps).
func SkipPath(path string) bool {
	switch {
	case path == "", strings.HasPrefix(path, "["), strings.HasPrefix(path, "//anon"),
		strings.HasPrefix(path, "/memfd:"), strings.HasPrefix(path, "anon_inode:"):
		return true
	}
	return false
}

// Classify returns the mode of a mapping of bin. The verdict is kept per
// binary (device and inode), so a process whose mappings change gets new
// mappings classified as they appear; bin replaced on disk is a new key.
func (s *Symbolizer) Classify(ref MappingRef, bin *Binary) Mode {
	if SkipPath(ref.Path) || bin == nil {
		s.stats.modeSkip.Add(1)
		return ModeSkip
	}
	return s.classify(ref, bin).mode
}

func (s *Symbolizer) classify(ref MappingRef, bin *Binary) *classification {
	s.mu.Lock()
	c, ok := s.classified[ref.Key]
	s.mu.Unlock()
	if ok {
		return c
	}
	c = s.evaluate(ref, bin)
	switch c.mode {
	case ModeSkip:
		s.stats.modeSkip.Add(1)
	case ModeProcess:
		s.stats.modeProcess.Add(1)
	case ModeFile:
		s.stats.modeFile.Add(1)
	}
	s.mu.Lock()
	if len(s.classified) >= maxClassified {
		clear(s.classified)
	}
	s.classified[ref.Key] = c
	s.mu.Unlock()
	return c
}

func (s *Symbolizer) evaluate(ref MappingRef, bin *Binary) *classification {
	file, haveFile := binaryFile(bin)
	if haveFile && s.nothing.Contains(file) {
		s.stats.negativeHits.Add(1)
		return &classification{mode: ModeSkip}
	}
	if bin.HasDWARF() || bin.HasSymtab() || bin.HasGopclntab() {
		return &classification{mode: ModeProcess}
	}
	if key, ok := s.resolveDebugLink(ref, bin); ok {
		return &classification{mode: ModeProcess, debugKey: key}
	}
	if id := bin.BuildIDGNU(); buildid.Valid(id) {
		return &classification{mode: ModeFile, debugKey: id}
	}
	// No debug info anywhere: .dynsym is all there is.
	if bin.SymbolsErr() == nil {
		return &classification{mode: ModeProcess}
	}
	if haveFile {
		s.nothing.Add(file)
	}
	return &classification{mode: ModeSkip}
}

// binaryFile returns the identity of bin's open file.
func binaryFile(bin *Binary) (negcache.File, bool) {
	fi, err := bin.file.Stat()
	if err != nil {
		return negcache.File{}, false
	}
	return negcache.FileOf(fi)
}

// Symbolize names the address at fileOffset (addr - start + pgoff) of a
// mapping of bin. For return addresses the call instruction is named.
func (s *Symbolizer) Symbolize(ref MappingRef, bin *Binary, fileOffset uint64, isReturn bool) Lookup {
	vaddr, ok := bin.Mapper().FileOffsetToVirtualAddress(fileOffset)
	if !ok {
		s.stats.unmapped.Add(1)
		return Lookup{Status: Unmapped}
	}
	if isReturn {
		vaddr--
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
			if dbg := s.table(c.debugKey); dbg != nil {
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

// table returns a held reference to a parsed debug file, nil if not held.
func (s *Symbolizer) table(key string) *Binary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tables.get(key)
}

// debugFile returns the parsed debug file of buildID, looking on disk in
// order (system dir, configured dirs, the cache) and otherwise starting a
// background fetch, in which case pending is true.
func (s *Symbolizer) debugFile(buildID string) (dbg *Binary, pending bool) {
	if dbg := s.table(buildID); dbg != nil {
		return dbg, false
	}
	for _, p := range s.localCandidates(buildID) {
		if dbg := s.openDebug(buildID, p, func(b *Binary) bool { return b.BuildIDGNU() == buildID }); dbg != nil {
			return dbg, false
		}
	}
	return nil, s.startFetch(buildID)
}

func (s *Symbolizer) localCandidates(buildID string) []string {
	rel := filepath.Join(".build-id", buildID[:2], buildID[2:]+".debug")
	paths := []string{filepath.Join(s.cfg.SystemDebugDir, rel)}
	for _, d := range s.cfg.DebugDirectories {
		paths = append(paths, filepath.Join(d, rel))
	}
	if s.cache != nil {
		if p, ok := s.cache.Lookup(buildID); ok {
			paths = append(paths, p)
		}
	}
	return paths
}

// openDebug opens, validates and parses the candidate at path, and keeps
// it in the tables under key. A candidate that fails is marked bad by its
// (dev, inode, size, mtime), so the next candidate is tried and a good
// sibling copy is never blocked.
func (s *Symbolizer) openDebug(key, path string, matches func(*Binary) bool) *Binary {
	f, err := s.openLocal(path)
	if err != nil {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil
	}
	id, haveID := negcache.FileOf(fi)
	if haveID && s.badDebug.Contains(id) {
		s.stats.negativeHits.Add(1)
		f.Close()
		return nil
	}
	bad := func() *Binary {
		s.stats.parseFailures.Add(1)
		if haveID {
			s.badDebug.Add(id)
		}
		if s.cache != nil && strings.HasPrefix(path, s.cache.Dir()+string(filepath.Separator)) {
			s.cache.Remove(key)
		}
		return nil
	}
	b, err := OpenBinary(f)
	if err != nil {
		return bad()
	}
	if !matches(b) || (!b.HasDWARF() && !b.HasSymtab()) {
		b.Close()
		return bad()
	}
	if b.HasDWARF() && b.DWARFErr() != nil {
		b.Close()
		return bad()
	}
	if b.HasSymtab() && b.SymbolsErr() != nil && !b.HasDWARF() {
		b.Close()
		return bad()
	}
	b.loadSymbols()
	s.stats.localHits.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.tables.get(key); held != nil {
		// Another lookup got there first.
		b.Close()
		return held
	}
	s.tables.add(key, b)
	return s.tables.get(key)
}

// startFetch starts fetching buildID unless a fetch is running, failed
// recently, or fetching is off. It reports whether a fetch is running.
func (s *Symbolizer) startFetch(buildID string) bool {
	if s.cache == nil || !s.client.Enabled() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.pending[buildID] {
		return true
	}
	if until, ok := s.failedFetch[buildID]; ok {
		if time.Now().Before(until) {
			s.stats.negativeHits.Add(1)
			return false
		}
		delete(s.failedFetch, buildID)
	}
	s.pending[buildID] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		res, err := s.client.Fetch(s.ctx, buildID, s.cache, validateDebugFile(buildID))
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.pending, buildID)
		s.stats.fetchByte.Add(res.Bytes)
		if err != nil {
			if errors.Is(err, debuginfod.ErrInvalid) {
				s.stats.parseFailures.Add(1)
			} else {
				s.stats.fetchFailures.Add(1)
			}
			if len(s.failedFetch) >= maxNegativeEntries {
				s.sweepFailedLocked()
			}
			s.failedFetch[buildID] = time.Now().Add(s.cfg.NegativeTTL)
			return
		}
		s.stats.fetches.Add(1)
	}()
	return true
}

// sweepFailedLocked drops expired failed fetches, then the oldest if the
// map is still full.
func (s *Symbolizer) sweepFailedLocked() {
	now := time.Now()
	var oldest string
	var oldestAt time.Time
	for id, until := range s.failedFetch {
		if now.After(until) {
			delete(s.failedFetch, id)
			continue
		}
		if oldest == "" || until.Before(oldestAt) {
			oldest, oldestAt = id, until
		}
	}
	if len(s.failedFetch) >= maxNegativeEntries {
		delete(s.failedFetch, oldest)
	}
}

// FetchFailed reports whether buildID is in the failed-fetch negative cache.
func (s *Symbolizer) FetchFailed(buildID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.failedFetch[buildID]
	return ok && time.Now().Before(until)
}

// FetchPending reports whether buildID is being fetched.
func (s *Symbolizer) FetchPending(buildID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[buildID]
}

// validateDebugFile accepts a download only if it is an ELF file carrying
// buildID and some symbols or DWARF.
func validateDebugFile(buildID string) debuginfod.Validator {
	return func(f *os.File) error {
		ef, err := elf.NewFile(f)
		if err != nil {
			return fmt.Errorf("parsing ELF: %w", err)
		}
		if got := readBuildIDs(ef, f).gnu; got != buildID {
			return fmt.Errorf("build-id is %q, want %q", got, buildID)
		}
		if ef.Section(".debug_info") == nil && ef.Section(".zdebug_info") == nil && ef.Section(".symtab") == nil {
			return errors.New("no DWARF and no symbol table")
		}
		return nil
	}
}

// resolveDebugLink follows bin's .gnu_debuglink in gdb's order: the
// binary's directory, its .debug subdirectory, then the global debug
// directories with the binary's directory appended. Paths are resolved
// inside the process's root. The target's CRC32 must match.
func (s *Symbolizer) resolveDebugLink(ref MappingRef, bin *Binary) (string, bool) {
	name, crc, ok := bin.DebugLink()
	if !ok || ref.Path == "" || !filepath.IsAbs(ref.Path) {
		return "", false
	}
	dir := filepath.Dir(ref.Path)
	cands := []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name), filepath.Join(s.cfg.SystemDebugDir, dir, name)}
	for _, d := range s.cfg.DebugDirectories {
		cands = append(cands, filepath.Join(d, dir, name))
	}
	root := fmt.Sprintf("/proc/%d/root", ref.PID)
	if ref.PID <= 0 {
		root = ""
	}
	for i, c := range cands {
		// The system and configured directories are the collector's own;
		// the binary's directories live in the process's mount namespace.
		p := c
		if i < 2 {
			p = root + c
		}
		key := "debuglink:" + p
		if dbg := s.table(key); dbg != nil {
			dbg.Release()
			return key, true
		}
		if !fileCRCMatches(s.openLocal, p, crc) {
			continue
		}
		if dbg := s.openDebug(key, p, func(*Binary) bool { return true }); dbg != nil {
			dbg.Release()
			return key, true
		}
	}
	return "", false
}

// fileCRCMatches reports whether the file at p has the CRC32 (IEEE) crc.
func fileCRCMatches(open func(string) (*os.File, error), p string, crc uint32) bool {
	f, err := open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	return h.Sum32() == crc
}

// DebugLink returns the file name and CRC32 of the .gnu_debuglink section.
func (b *Binary) DebugLink() (name string, crc uint32, ok bool) {
	sect := b.elf.Section(".gnu_debuglink")
	if sect == nil || sect.Size > 4096 {
		return "", 0, false
	}
	data, err := sect.Data()
	if err != nil {
		return "", 0, false
	}
	end := strings.IndexByte(string(data), 0)
	if end <= 0 {
		return "", 0, false
	}
	name = string(data[:end])
	if strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return "", 0, false
	}
	off := alignUp(uint64(end+1), 4)
	if off+4 > uint64(len(data)) {
		return "", 0, false
	}
	return name, b.elf.ByteOrder.Uint32(data[off:]), true
}

// tableLRU holds parsed debug files under a byte budget. Evicted files are
// closed once their last reader releases them.
type tableLRU struct {
	maxBytes int64
	bytes    int64
	lru      *list.List // of *tableEntry, most recently used at the front
	byKey    map[string]*list.Element
}

type tableEntry struct {
	key  string
	bin  *Binary
	size int64
}

func newTableLRU(maxBytes int64) *tableLRU {
	return &tableLRU{maxBytes: maxBytes, lru: list.New(), byKey: map[string]*list.Element{}}
}

// get returns key's Binary with a reference the caller releases.
func (t *tableLRU) get(key string) *Binary {
	el, ok := t.byKey[key]
	if !ok {
		return nil
	}
	t.lru.MoveToFront(el)
	e := el.Value.(*tableEntry)
	e.bin.acquire()
	return e.bin
}

func (t *tableLRU) add(key string, b *Binary) {
	e := &tableEntry{key: key, bin: b, size: b.MemSize()}
	t.byKey[key] = t.lru.PushFront(e)
	t.bytes += e.size
	for t.bytes > t.maxBytes && t.lru.Len() > 1 {
		back := t.lru.Back()
		old := back.Value.(*tableEntry)
		t.lru.Remove(back)
		delete(t.byKey, old.key)
		t.bytes -= old.size
		old.bin.Close()
	}
}

func (t *tableLRU) closeAll() error {
	var errs []error
	for el := t.lru.Front(); el != nil; el = el.Next() {
		errs = append(errs, el.Value.(*tableEntry).bin.Close())
	}
	t.lru.Init()
	clear(t.byKey)
	t.bytes = 0
	return errors.Join(errs...)
}
