// Package loader keeps the BPF unwinder's file tables current. The
// sampler reads each sampled process's executable mappings itself, and
// asks (profiler.NoticeFile) for the table of every file a walk enters
// without one; the loader opens the file through the process that asked,
// has its CFI table built (internal/unwind/cfi) off the hot path, copies
// the rows into the sampler's row store and points the file's entry at
// them: once per file, however many processes map it, and from then on
// for every process that maps it, from its first sample.
//
// Where BPF cannot read mappings (profiler.NoticeRead, kernels without
// task work), the loader reads /proc/PID/maps and writes them.
//
// It works on its own goroutine: Request and Read only queue, never wait.
// The row store is bounded; the tables walked least recently are evicted
// to make room, and asked for again by the next walk that needs them.
package loader

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// Sink is where the loader writes: the sampler's unwind maps.
type Sink interface {
	UnwindRowCapacity() uint32
	WriteUnwindRows(first uint32, rows []cfi.Row, base uint64) error
	SetUnwindFile(key process.FileKey, f profiler.UnwindFile) error
	DeleteUnwindFile(key process.FileKey) error
	LookupUnwindFile(key process.FileKey) (profiler.UnwindFile, bool, error)
	UnwindFileUse() (map[process.FileKey]uint32, error)
	SetUnwindMappings(pid uint32, img profiler.Image, maps []profiler.UnwindMapping) (bool, error)
	UnwindMappings(pid uint32) ([]profiler.UnwindMapping, profiler.Image, bool, error)
	// SetUnwindVDSO sets the one table of the kernel's vDSO (the file
	// profiler.VDSOFile), rows' PCs offsets in the image relative to base.
	SetUnwindVDSO(rows []cfi.Row, base uint64) error
}

// Tables builds files' unwind tables off the loader's goroutine: a
// *cfi.Store. The loader asks with Request, learns through Built that a
// table is ready, and takes it with Get.
type Tables interface {
	Get(key process.FileKey) (*cfi.Entry, bool)
	Request(key process.FileKey, open func() (*os.File, error)) bool
}

// Config configures a Loader.
type Config struct {
	// Sink receives the rows and file tables.
	Sink Sink
	// Tables builds the files' tables.
	Tables Tables
	// MaxFiles bounds the files the loader keeps an entry for (with a
	// table or not); beyond it the ones walked least recently go. Zero
	// means 4096.
	MaxFiles int
	// MaxIdleFiles bounds the files with rows that no walk read for
	// IdleAfter, kept for the next process of the same file (a shell's
	// commands); beyond it the least recently walked go at a sweep. Zero
	// means 256.
	MaxIdleFiles int
	// IdleAfter is how long a table no walk read counts as idle. Zero
	// means a minute.
	IdleAfter time.Duration
	// QueueSize bounds the requests waiting; a request beyond it is
	// dropped, counted, and its file asked for again by a later walk.
	// Zero means 256.
	QueueSize int
	// SweepInterval is how often tables lost or idle are looked for. Zero
	// means one second.
	SweepInterval time.Duration
	// SweepOnTick makes Run sweep when Tick finds a sweep due, instead of
	// on a timer of its own: a caller that wakes up regularly anyway
	// saves the process a wakeup per sweep.
	SweepOnTick bool
	// ReleaseLoaded drops a table from Tables once its rows are in the
	// row store (when Tables has a Release method, as *cfi.Store does),
	// so Go holds only the tables not loaded yet. A table evicted from
	// the row store, or moved by a compaction, is then built again.
	ReleaseLoaded bool
	// Quarantine is how long rows freed by an eviction stay unused, so
	// that a walk that read the file's entry before it went never reads
	// another file's rows there. Zero means 100ms.
	Quarantine time.Duration
}

// releaser is the optional method of Tables that ReleaseLoaded uses.
type releaser interface {
	Release(key process.FileKey, e *cfi.Entry) bool
}

// Stats are the loader's counts.
type Stats struct {
	// Processes are the processes whose mappings the sampler holds, as
	// its notices (Noted) tell.
	Processes int64
	// Files are the files whose tables are in the row store.
	Files int64
	// RowBytes is the row store in use, CapacityBytes its size.
	RowBytes, CapacityBytes int64
	// Evictions counts file tables evicted to make room.
	Evictions int64
	// Loads counts reads of a process's mappings from /proc (NoticeRead);
	// LoadErrors those that failed (not those of a process that exited
	// meanwhile).
	Loads, LoadErrors int64
	// TableErrors counts files whose table could not be built, or
	// written into the sampler's row store.
	TableErrors int64
	// DroppedRequests counts requests dropped on a full queue.
	DroppedRequests int64
	// Compactions counts moves of the tables together, when the row
	// store's free room was in too small pieces.
	Compactions int64
}

// request is a NoticeFile: a walk of pid entered m, whose file has no
// table.
type request struct {
	pid uint32
	m   profiler.UnwindMapping
}

// read is a NoticeRead: read pid's mappings, of img, from /proc.
type read struct {
	pid uint32
	img profiler.Image
}

// Loader loads files' unwind tables into the sampler's maps.
type Loader struct {
	cfg      Config
	requests chan request
	reads    chan read
	built    chan process.FileKey
	// sweepDue asks Run for a sweep (SweepOnTick); lastTick is when Tick
	// last asked.
	sweepDue chan struct{}
	lastTick time.Time

	// Owned by the Run goroutine.
	tables *tableSet

	processes, loads, loadErrors, dropped atomic.Int64
	mu                                    sync.Mutex // serializes Sink reads of tests (Ready, Covers)
}

// New returns a Loader; Run does its work.
func New(cfg Config) *Loader {
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 4096
	}
	if cfg.MaxIdleFiles <= 0 {
		cfg.MaxIdleFiles = 256
	}
	if cfg.IdleAfter <= 0 {
		cfg.IdleAfter = time.Minute
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 256
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.Quarantine <= 0 {
		cfg.Quarantine = 100 * time.Millisecond
	}
	l := &Loader{
		cfg:      cfg,
		requests: make(chan request, cfg.QueueSize),
		reads:    make(chan read, cfg.QueueSize),
		built:    make(chan process.FileKey, cfg.QueueSize),
		sweepDue: make(chan struct{}, 1),
		lastTick: time.Now(),
	}
	l.tables = newTableSet(&l.cfg)
	return l
}

// Noted takes a notice of the sampler: a file to build, a process to read
// from /proc, a process read or gone (counted). It never blocks: a
// request beyond the queue is dropped, and its file's entry in the
// sampler deleted, so that a later walk asks again.
func (l *Loader) Noted(n *profiler.Notice) {
	switch n.Kind {
	case profiler.NoticeFile:
		if len(n.Mappings) != 1 {
			return
		}
		select {
		case l.requests <- request{pid: n.PID, m: n.Mappings[0]}:
		default:
			l.dropped.Add(1)
			_ = l.cfg.Sink.DeleteUnwindFile(n.Mappings[0].File)
		}
	case profiler.NoticeRead:
		select {
		case l.reads <- read{pid: n.PID, img: n.Image}:
		default:
			l.dropped.Add(1) // asked again by a later sample
		}
	case profiler.NoticeProcess:
		if n.New {
			l.processes.Add(1)
		}
	case profiler.NoticeExit:
		l.processes.Add(-1)
	}
}

// Built tells the loader that key's table is ready in Tables (a
// cfi.Store's onBuilt). It never blocks; a notice lost on a full queue is
// caught up by the next sweep.
func (l *Loader) Built(key process.FileKey) {
	select {
	case l.built <- key:
	default:
	}
}

// Stats returns the loader's counts; safe from any goroutine.
func (l *Loader) Stats() Stats {
	t := l.tables
	return Stats{
		Processes:       max(l.processes.Load(), 0),
		Files:           t.nfiles.Load(),
		RowBytes:        t.rowBytes.Load(),
		CapacityBytes:   int64(t.arena.size) * profiler.UnwindRowBytes,
		Evictions:       t.evictions.Load(),
		Loads:           l.loads.Load(),
		LoadErrors:      l.loadErrors.Load(),
		TableErrors:     t.tableErr.Load(),
		DroppedRequests: l.dropped.Load(),
		Compactions:     t.compactions.Load(),
	}
}

// Tick asks Run for a sweep when SweepInterval passed since the last one
// it asked for. It is for one goroutine, and never blocks.
func (l *Loader) Tick(now time.Time) {
	if now.Sub(l.lastTick) < l.cfg.SweepInterval {
		return
	}
	l.lastTick = now
	select {
	case l.sweepDue <- struct{}{}:
	default: // one is due already
	}
}

// Run serves requests and sweeps until ctx is done; then it closes the
// files it held open for builds.
func (l *Loader) Run(ctx context.Context) {
	defer l.tables.closeFiles()
	l.loadVDSO()
	var ticker <-chan time.Time // nil, never ready, with SweepOnTick
	if !l.cfg.SweepOnTick {
		t := time.NewTicker(l.cfg.SweepInterval)
		defer t.Stop()
		ticker = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-l.requests:
			l.tables.request(r.pid, &r.m)
		case r := <-l.reads:
			_ = l.Read(r.pid, r.img)
		case key := <-l.built:
			l.tables.rebuilt(key)
		case <-ticker:
			l.tables.sweep()
		case <-l.sweepDue:
			l.tables.sweep()
		}
	}
}

// Ready reports whether the sampler holds pid's mappings, at least one of
// its files' tables is loaded (or known to be none), and none it asked
// for is still pending: its samples are walked with CFI from now on, but
// for files no walk entered yet. For tests and benchmarks.
func (l *Loader) Ready(pid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps, _, ok, err := l.cfg.Sink.UnwindMappings(pid)
	if err != nil || !ok || len(maps) == 0 {
		return false
	}
	loaded := false
	for i := range maps {
		if maps[i].Kind != profiler.MappingFile {
			continue
		}
		f, ok, err := l.cfg.Sink.LookupUnwindFile(maps[i].File)
		switch {
		case err != nil:
			return false
		case !ok:
		case f.State == profiler.FilePending:
			return false
		default:
			loaded = true
		}
	}
	return loaded
}

// Covers reports whether the sampler holds a mapping of pid containing
// addr whose walk needs nothing more: its file's table is loaded, or
// known to be none. For tests.
func (l *Loader) Covers(pid uint32, addr uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps, _, ok, err := l.cfg.Sink.UnwindMappings(pid)
	if err != nil || !ok {
		return false
	}
	for i := range maps {
		m := &maps[i]
		if addr < m.Start || addr >= m.End {
			continue
		}
		if m.Kind != profiler.MappingFile {
			return true
		}
		f, ok, err := l.cfg.Sink.LookupUnwindFile(m.File)
		return err == nil && ok && f.State != profiler.FilePending
	}
	return false
}
