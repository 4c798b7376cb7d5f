// Package loader keeps the BPF unwinder's maps current. For every sampled
// process it writes the executable mappings, and for every file they map
// the file's compiled CFI table (internal/unwind/cfi) into the sampler's
// row store, once per file however many processes map it.
//
// It works off the hot path on its own goroutine: Observe only queues a
// process, never waits. Until a process is loaded its samples are walked
// with frame pointers. The row store is bounded; the tables used least
// recently are evicted to make room.
package loader

import (
	"container/list"
	"context"
	"debug/elf"
	"errors"
	"io/fs"
	"math"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// maxUserAddr is the highest user address on x86-64 ([vsyscall] is above).
const maxUserAddr = 0x00007fffffffffff

// Sink is where the loader writes: the sampler's unwind maps.
type Sink interface {
	UnwindRowCapacity() uint32
	WriteUnwindRows(first uint32, rows []cfi.Row, base uint64) error
	SetUnwindMappings(pid uint32, maps []profiler.UnwindMapping) error
	DeleteUnwindMappings(pid uint32) error
	// SetUnwindVDSO sets the one table of the kernel's vDSO, rows' PCs
	// relative to base, in an image whose first byte is at 0.
	SetUnwindVDSO(rows []cfi.Row, base, size uint64) error
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
	// Sink receives the rows and mappings.
	Sink Sink
	// Tables builds the files' tables.
	Tables Tables
	// MaxProcesses bounds the processes loaded; beyond it the one seen
	// least recently is dropped. Zero means 1024.
	MaxProcesses int
	// MaxIdleFiles bounds the files that no loaded process maps any more
	// but that keep their entry, and their rows, for the next process of
	// the same file (a shell's commands); beyond it the least recently
	// used go at a sweep. Zero means 256.
	MaxIdleFiles int
	// QueueSize bounds the processes waiting to be loaded; a request
	// beyond it is dropped and counted. Zero means 256.
	QueueSize int
	// ResyncInterval is the least time between two loads of one process.
	// Zero means 500ms.
	ResyncInterval time.Duration
	// SweepInterval is how often exited and exec'd processes are found.
	// Zero means one second.
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
	// OnDemand builds a file's table only once a sample of a loaded
	// process has a frame in it, or when it is the process's executable:
	// the many libraries a process maps but no sampled stack enters cost
	// no build. Until then the walk steps through the file by frame
	// pointers, as through a file whose table is being built, and the
	// sample that shows the frame asks for the table. Each frame the
	// table then walks exactly names the next file needed, so a stack
	// gets every table it needs within a few samples.
	OnDemand bool
	// Processes, when set, is told of each process's executable
	// mappings whenever the loader reads them, and of each process it
	// drops (exited, exec'd, or evicted).
	Processes ProcessObserver
}

// ProcessObserver learns of the processes the loader reads. Its methods
// must not block: they run on the loader's goroutine.
type ProcessObserver interface {
	Mapped(pid uint32, maps []process.Mapping)
	Forgot(pid uint32)
}

// releaser is the optional method of Tables that ReleaseLoaded uses.
type releaser interface {
	Release(key process.FileKey, e *cfi.Entry) bool
}

// Stats are the loader's counts.
type Stats struct {
	// Processes and Files are the processes and file tables loaded now.
	Processes, Files int64
	// RowBytes is the row store in use, CapacityBytes its size.
	RowBytes, CapacityBytes int64
	// Evictions counts file tables evicted to make room.
	Evictions int64
	// Loads counts process loads; LoadErrors those that failed (not
	// those of a process that exited meanwhile), and processes whose
	// mappings could not be deleted from the sampler.
	Loads, LoadErrors int64
	// TableErrors counts files whose table could not be built, or
	// written into the sampler's row store.
	TableErrors int64
	// DroppedRequests counts load requests, and asks for a deferred
	// file's table (OnDemand; a later sample asks again), dropped on a
	// full queue.
	DroppedRequests int64
	// Compactions counts moves of the tables together, when the row
	// store's free room was in too small pieces.
	Compactions int64
}

// fileState is where a file's table is.
type fileState uint8

const (
	// filePending: the table is being built, or was evicted; frame
	// pointers meanwhile.
	filePending fileState = iota
	// fileRows: the table is in the row store.
	fileRows
	// fileFramePointers: no usable CFI (none, Go, too large); frame
	// pointers for good.
	fileFramePointers
	// fileDeferred (OnDemand): no sampled frame was in the file yet; not
	// opened, no table asked for; frame pointers meanwhile.
	fileDeferred
)

// fileEntry is one file mapped by loaded processes.
//
// Tables are keyed by file (device and inode), never by build id as the
// symbolizer shares a Binary between copies of one build: CFI rows decide
// which words of a process's stack the BPF walk reads and reports as
// return addresses, and a file made by one user to carry another's build
// id must not decide that for the other user's processes. Copies of one
// build therefore each build and load their own table; MaxIdleFiles keeps
// the ones no process maps any more from piling up.
type fileEntry struct {
	key   process.FileKey
	state fileState
	first uint32 // rows [first, first+count) of the store
	count uint32
	base  uint64 // ELF address the rows' PCs are relative to
	loads []elf.ProgHeader
	open  func() (*os.File, error)
	refs  int // processes mapping it
	lru   *list.Element
}

type procIdentity struct {
	startTime string
	exeDev    uint64
	exeIno    uint64
}

// writtenMaps are a process's mappings as the sampler holds them.
type writtenMaps struct {
	maps []profiler.UnwindMapping // sorted by Start, as /proc lists them
	// deferred[i] is set while maps[i]'s file is deferred and not asked
	// for yet; ndeferred counts them.
	deferred  []bool
	ndeferred int
}

// want is a frame of a sample, at pc, in a deferred file of pid.
type want struct {
	pid uint32
	pc  uint64
}

// maxHints bounds the frames kept from the sample that queued a load.
const maxHints = 32

type procEntry struct {
	id    procIdentity
	maps  []process.Mapping // executable mappings
	files map[*fileEntry]struct{}
	seen  time.Time
}

// Loader loads processes' unwind tables into the sampler's maps.
type Loader struct {
	cfg      Config
	requests chan uint32
	// sweepDue asks Run for a sweep (SweepOnTick); lastTick is when Tick
	// last asked.
	sweepDue chan struct{}
	lastTick time.Time

	built chan process.FileKey
	// wants carries the frames, in deferred files, of samples of loaded
	// processes (OnDemand).
	wants chan want

	mu       sync.Mutex
	queued   map[uint32]struct{}
	lastLoad map[uint32]time.Time
	seen     map[uint32]struct{}
	written  map[uint32]*writtenMaps // what the sampler holds
	// hints are the frames of the sample that queued a process's load
	// (OnDemand): their files are wanted from the first load on.
	hints map[uint32][]uint64

	// Owned by the Run goroutine.
	arena *arena
	files map[process.FileKey]*fileEntry
	lru   *list.List // of *fileEntry with rows; front is most recent
	procs map[uint32]*procEntry
	// pinned are the files of the process being loaded; noEvict is set
	// while a sweep retries pending files, which takes free room only.
	pinned  map[*fileEntry]struct{}
	noEvict bool

	processes, nfiles, rowBytes, capBytes  atomic.Int64
	evictions, loads, loadErrors, tableErr atomic.Int64
	dropped, compactions                   atomic.Int64
}

// New returns a Loader; Run does its work.
func New(cfg Config) *Loader {
	if cfg.MaxProcesses <= 0 {
		cfg.MaxProcesses = 1024
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 256
	}
	if cfg.MaxIdleFiles <= 0 {
		cfg.MaxIdleFiles = 256
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = 500 * time.Millisecond
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
	l := &Loader{
		cfg:      cfg,
		requests: make(chan uint32, cfg.QueueSize),
		sweepDue: make(chan struct{}, 1),
		lastTick: time.Now(),
		built:    make(chan process.FileKey, cfg.QueueSize),
		wants:    make(chan want, cfg.QueueSize),
		queued:   map[uint32]struct{}{},
		lastLoad: map[uint32]time.Time{},
		seen:     map[uint32]struct{}{},
		written:  map[uint32]*writtenMaps{},
		hints:    map[uint32][]uint64{},
		arena:    newArena(cfg.Sink.UnwindRowCapacity()),
		files:    map[process.FileKey]*fileEntry{},
		lru:      list.New(),
		procs:    map[uint32]*procEntry{},
	}
	l.capBytes.Store(int64(cfg.Sink.UnwindRowCapacity()) * profiler.UnwindRowBytes)
	return l
}

// Observe notes a sample. A process whose tables are not loaded, or whose
// walk met an address outside its loaded mappings (dlopen, new JIT code),
// is queued for loading; with OnDemand, the deferred files the sample has
// frames in are asked for. It never blocks.
func (l *Loader) Observe(s *profiler.Sample) {
	if s.KernelThread || s.PID == 0 {
		return
	}
	pid := s.PID
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) < 4*l.cfg.MaxProcesses {
		l.seen[pid] = struct{}{}
	}
	if w := l.written[pid]; w != nil && w.ndeferred > 0 && !s.NoTable {
		l.want(pid, w, s.User)
	}
	if !s.NoTable && !s.UnknownMapping {
		return
	}
	if _, ok := l.queued[pid]; ok {
		return
	}
	if t, ok := l.lastLoad[pid]; ok && time.Since(t) < l.cfg.ResyncInterval {
		return
	}
	select {
	case l.requests <- pid:
		l.queued[pid] = struct{}{}
		if l.cfg.OnDemand && len(s.User) > 0 {
			l.hints[pid] = append([]uint64(nil), s.User[:min(len(s.User), maxHints)]...)
		}
	default:
		l.dropped.Add(1)
	}
}

// want asks for the deferred files that user, a stack of pid, has frames
// in; l.mu is held.
func (l *Loader) want(pid uint32, w *writtenMaps, user []uint64) {
	for i, pc := range user {
		if i > 0 && pc > 0 {
			pc-- // a return address: the call is before it
		}
		j, ok := mappingAt(w.maps, pc)
		if !ok || !w.deferred[j] {
			continue
		}
		select {
		case l.wants <- want{pid: pid, pc: pc}:
			w.deferred[j] = false
			w.ndeferred--
		default:
			l.dropped.Add(1) // asked again by a later sample
			return
		}
	}
}

// mappingAt returns the index of the mapping of maps, sorted by Start,
// that holds pc.
func mappingAt(maps []profiler.UnwindMapping, pc uint64) (int, bool) {
	j := sort.Search(len(maps), func(k int) bool { return maps[k].End > pc })
	return j, j < len(maps) && maps[j].Start <= pc
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
	return Stats{
		Processes:       l.processes.Load(),
		Files:           l.nfiles.Load(),
		RowBytes:        l.rowBytes.Load(),
		CapacityBytes:   l.capBytes.Load(),
		Evictions:       l.evictions.Load(),
		Loads:           l.loads.Load(),
		LoadErrors:      l.loadErrors.Load(),
		TableErrors:     l.tableErr.Load(),
		DroppedRequests: l.dropped.Load(),
		Compactions:     l.compactions.Load(),
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

// Run loads queued processes and drops exited ones until ctx is done.
func (l *Loader) Run(ctx context.Context) {
	var ticker <-chan time.Time // nil, never ready, with SweepOnTick
	if !l.cfg.SweepOnTick {
		t := time.NewTicker(l.cfg.SweepInterval)
		defer t.Stop()
		ticker = t.C
	}
	l.loadVDSO()
	for {
		select {
		case <-ctx.Done():
			return
		case pid := <-l.requests:
			l.mu.Lock()
			delete(l.queued, pid)
			l.lastLoad[pid] = time.Now()
			l.mu.Unlock()
			l.Load(pid)
		case key := <-l.built:
			l.rebuilt(key)
		case w := <-l.wants:
			l.wanted(w)
		case <-ticker:
			l.sweep()
		case <-l.sweepDue:
			l.sweep()
		}
	}
}

// Load reads pid's mappings and writes them, loading the tables of files
// not loaded yet. Only the Run goroutine (or a test, before Run) calls it.
func (l *Loader) Load(pid uint32) error {
	l.loads.Add(1)
	err := l.load(pid)
	// A process that exited before it was read is no failure.
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
		l.loadErrors.Add(1)
	}
	return err
}

func (l *Loader) load(pid uint32) error {
	id, err := identity(pid)
	if err != nil {
		l.forget(pid)
		return err
	}
	all, err := process.ReadMappings(int(pid))
	if err != nil {
		l.forget(pid)
		return err
	}
	var maps []process.Mapping
	for _, m := range all {
		if m.Executable() && m.Start <= maxUserAddr {
			maps = append(maps, m)
		}
	}
	pe := l.procs[pid]
	if pe == nil {
		l.makeRoomForProcess()
		pe = &procEntry{files: map[*fileEntry]struct{}{}}
		l.procs[pid] = pe
		l.processes.Store(int64(len(l.procs)))
	}
	pe.id, pe.seen = id, time.Now()
	if l.cfg.Processes != nil {
		l.cfg.Processes.Mapped(pid, maps)
	}
	var hints []uint64
	if l.cfg.OnDemand {
		l.mu.Lock()
		hints = l.hints[pid]
		delete(l.hints, pid)
		l.mu.Unlock()
	}
	exe := process.FileKey{Dev: id.exeDev, Ino: id.exeIno}
	files := map[*fileEntry]struct{}{}
	// The process's own tables are not evicted to make room for each
	// other: a process that needs more than the store holds keeps some
	// pending instead of thrashing.
	for i := range maps {
		m := &maps[i]
		wanted := !l.cfg.OnDemand || (m.File() && m.Key() == exe) || holdsAny(m, hints)
		if fe := l.file(pid, m, wanted); fe != nil {
			files[fe] = struct{}{}
		}
	}
	l.pinned = files
	for fe := range files {
		if fe.state == filePending {
			l.materialize(fe)
		}
	}
	l.pinned = nil
	for fe := range files {
		if _, ok := pe.files[fe]; !ok {
			fe.refs++
		}
		l.touch(fe)
	}
	old := pe.files
	pe.files, pe.maps = files, maps
	for fe := range old {
		if _, ok := files[fe]; !ok {
			fe.refs--
		}
	}
	return l.write(pid, pe)
}

// holdsAny reports whether one of pcs, frames of a stack, is in m.
func holdsAny(m *process.Mapping, pcs []uint64) bool {
	for i, pc := range pcs {
		if i > 0 && pc > 0 {
			pc--
		}
		if pc >= m.Start && pc < m.End {
			return true
		}
	}
	return false
}

// write puts pe's mappings into the sampler.
func (l *Loader) write(pid uint32, pe *procEntry) error {
	out := make([]profiler.UnwindMapping, 0, len(pe.maps))
	var deferred []bool
	ndeferred := 0
	for i := range pe.maps {
		m := &pe.maps[i]
		um := profiler.UnwindMapping{Start: m.Start, End: m.End, Kind: profiler.MappingFramePointer}
		if m.File() {
			fe := l.files[m.Key()]
			switch {
			case fe == nil || fe.state == filePending:
				um.Kind = profiler.MappingPending
			case fe.state == fileDeferred:
				um.Kind = profiler.MappingPending
				if deferred == nil {
					deferred = make([]bool, len(pe.maps))
				}
				deferred[i] = true
				ndeferred++
			case fe.state == fileRows:
				if bias, ok := loadBias(fe.loads, m); ok {
					um.Kind = profiler.MappingCFI
					um.TableBase = fe.base + bias
					um.RowFirst, um.RowCount = fe.first, fe.count
				}
			}
		}
		out = append(out, um)
	}
	if err := l.cfg.Sink.SetUnwindMappings(pid, out); err != nil {
		return err
	}
	if deferred == nil {
		deferred = make([]bool, len(out))
	}
	l.mu.Lock()
	l.written[pid] = &writtenMaps{maps: out, deferred: deferred, ndeferred: ndeferred}
	l.mu.Unlock()
	return nil
}

// Ready reports whether pid's mappings are in the sampler with every
// file's table loaded, but for the files that OnDemand defers and no
// sample asked for yet: its samples are walked with CFI from now on.
func (l *Loader) Ready(pid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.written[pid]
	if !ok {
		return false
	}
	for i, m := range w.maps {
		ok = ok && (m.Kind != profiler.MappingPending || w.deferred[i])
	}
	return ok
}

// Covers reports whether the sampler holds a mapping of pid containing
// addr, with its file's table loaded (or known to have none).
func (l *Loader) Covers(pid uint32, addr uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.written[pid]
	if w == nil {
		return false
	}
	if j, ok := mappingAt(w.maps, addr); ok {
		return w.maps[j].Kind != profiler.MappingPending
	}
	return false
}

// loadBias is the difference between m's runtime addresses and the ELF
// addresses of the executable segment it maps. Only executable segments
// count: the page that holds the end of the read-only segment before the
// code is mapped again, at another offset-to-address delta, as the code's
// first page.
func loadBias(loads []elf.ProgHeader, m *process.Mapping) (uint64, bool) {
	for _, p := range loads {
		if p.Flags&elf.PF_X == 0 {
			continue
		}
		start := p.Off &^ 0xfff
		if m.Offset >= start && m.Offset < p.Off+p.Filesz {
			return m.Start - m.Offset - (p.Vaddr - p.Off), true
		}
	}
	return 0, false
}

// file returns the entry of m's file, pending the first time, or
// deferred when not wanted (OnDemand). A deferred entry that is now
// wanted is opened. It returns nil when the file cannot be opened now.
func (l *Loader) file(pid uint32, m *process.Mapping, wanted bool) *fileEntry {
	key := m.Key()
	if fe, ok := l.files[key]; ok {
		// The latest process to map it opens it from now on: the one
		// it was first seen in may be gone by the time its table is
		// wanted, or built again.
		fe.open = opener(pid, m)
		if wanted && fe.state == fileDeferred {
			l.inspect(fe)
		}
		return fe
	}
	open := opener(pid, m)
	fe := &fileEntry{key: key, open: open}
	if !wanted {
		// Not opened: most libraries a process maps are never on a
		// sampled stack.
		fe.state = fileDeferred
		return l.addFile(fe)
	}
	f, err := open()
	if err != nil {
		return nil
	}
	l.inspectFile(fe, f)
	return l.addFile(fe)
}

// openFile opens fe's file for a build, which runs later on the store's
// goroutine: through the latest process loaded with it, else through up
// to maxOpeners other processes loaded with it. The process that asked
// may exit before the build while others still map the file; its table
// must not then fall back to frame pointers for every process.
func (l *Loader) openFile(fe *fileEntry) func() (*os.File, error) {
	opens := []func() (*os.File, error){fe.open}
	for pid, pe := range l.procs {
		if len(opens) > maxOpeners {
			break
		}
		if _, ok := pe.files[fe]; !ok {
			continue
		}
		for i := range pe.maps {
			if m := &pe.maps[i]; m.File() && m.Key() == fe.key {
				opens = append(opens, opener(pid, m))
				break
			}
		}
	}
	return func() (*os.File, error) {
		var first error
		for _, open := range opens {
			f, err := open()
			if err == nil {
				return f, nil
			}
			if first == nil {
				first = err
			}
		}
		return nil, first
	}
}

// maxOpeners bounds the other processes a build tries to open a file
// through.
const maxOpeners = 4

// opener opens m's file through pid, a process that maps it now.
func opener(pid uint32, m *process.Mapping) func() (*os.File, error) {
	mapping := *m
	return func() (*os.File, error) { return process.OpenMapping(int(pid), &mapping) }
}

// inspect opens a deferred file and makes it pending, or frame pointers
// for good when it has no table to build (Go, not ELF, gone).
func (l *Loader) inspect(fe *fileEntry) {
	f, err := fe.open()
	if err != nil {
		fe.state = fileFramePointers
		return
	}
	l.inspectFile(fe, f)
}

// inspectFile reads f, fe's file, which it closes: its loadable segments,
// and whether it has a table to build.
func (l *Loader) inspectFile(fe *fileEntry, f *os.File) {
	defer f.Close()
	fe.state = filePending
	ef, err := elf.NewFile(f)
	if err != nil {
		fe.state = fileFramePointers
		return
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			fe.loads = append(fe.loads, p.ProgHeader)
		}
	}
	// Go keeps frame pointers everywhere, and its CFI says nothing about
	// RBP: frame pointers are exact there.
	if ef.Section(".gopclntab") != nil || ef.Section(".go.buildinfo") != nil {
		fe.state = fileFramePointers
	}
}

// wanted opens the deferred file that a sample had a frame in and asks
// for its table; the processes mapping it are rewritten once it is
// loaded, or now when it has none.
func (l *Loader) wanted(w want) {
	pe, ok := l.procs[w.pid]
	if !ok {
		return
	}
	for i := range pe.maps {
		m := &pe.maps[i]
		if w.pc < m.Start || w.pc >= m.End || !m.File() {
			continue
		}
		fe := l.files[m.Key()]
		if fe == nil || fe.state != fileDeferred {
			return
		}
		fe.open = opener(w.pid, m)
		l.inspect(fe)
		if fe.state != filePending {
			l.rewrite(fe)
			return
		}
		l.pinned = pe.files
		l.materialize(fe)
		l.pinned = nil
		if fe.state == filePending {
			// Being built: the processes mapping it no longer ask.
			l.rewrite(fe)
		}
		return
	}
}

// materialize puts a pending file's table into the row store when it is
// built, and asks for it otherwise. The processes mapping it are rewritten.
func (l *Loader) materialize(fe *fileEntry) {
	e, ok := l.cfg.Tables.Get(fe.key)
	if !ok {
		l.cfg.Tables.Request(fe.key, l.openFile(fe))
		return
	}
	if e.Table == nil || len(e.Table.Rows) == 0 {
		if e.Err != nil {
			l.tableErr.Add(1)
		}
		if errors.Is(e.Err, cfi.ErrPending) {
			l.cfg.Tables.Request(fe.key, l.openFile(fe)) // built again once fetched
			return
		}
		fe.state = fileFramePointers
		l.rewrite(fe)
		return
	}
	rows := e.Table.Rows
	base := rows[0].PC
	if rows[len(rows)-1].PC-base > math.MaxUint32 || uint64(len(rows)) > uint64(l.arena.size) {
		l.tableErr.Add(1)
		fe.state = fileFramePointers
		l.rewrite(fe)
		return
	}
	first, ok := l.alloc(uint32(len(rows)))
	if !ok {
		return
	}
	if err := l.cfg.Sink.WriteUnwindRows(first, rows, base); err != nil {
		l.arena.release(first, uint32(len(rows)))
		l.tableErr.Add(1)
		return
	}
	fe.state, fe.first, fe.count, fe.base = fileRows, first, uint32(len(rows)), base
	if r, ok := l.cfg.Tables.(releaser); ok && l.cfg.ReleaseLoaded {
		r.Release(fe.key, e)
	}
	fe.lru = l.lru.PushFront(fe)
	l.rowBytes.Store(int64(l.arena.used) * profiler.UnwindRowBytes)
	l.nfiles.Store(int64(l.lru.Len()))
	l.rewrite(fe)
}

// rebuilt loads a table that was built: a pending file's first one, or a
// better one (filled from a debug file fetched meanwhile) for a file
// whose table is loaded.
func (l *Loader) rebuilt(key process.FileKey) {
	fe, ok := l.files[key]
	if !ok {
		return
	}
	if fe.state == fileRows {
		e, ok := l.cfg.Tables.Get(key)
		if !ok || e.Table == nil || len(e.Table.Rows) == int(fe.count) {
			return
		}
		l.evict(fe)
		l.evictions.Add(-1) // replaced, not evicted for room
	}
	if fe.state == filePending {
		if _, held := l.cfg.Tables.Get(key); !held {
			// Not opened through any process loaded with it
			// (cfi.ErrOpen: they exited): deferred again, the next
			// sample in it asks for it through its own process.
			fe.state = fileDeferred
			l.rewrite(fe)
			return
		}
		l.materialize(fe)
	}
}

// rewrite writes again the mappings of every loaded process mapping fe.
func (l *Loader) rewrite(fe *fileEntry) {
	for pid, pe := range l.procs {
		if _, ok := pe.files[fe]; ok {
			if err := l.write(pid, pe); err != nil {
				// Gone, or the map refused: never leave a process
				// pointing at rows that may be reused.
				l.forget(pid)
			}
		}
	}
}

func (l *Loader) addFile(fe *fileEntry) *fileEntry {
	l.files[fe.key] = fe
	// Entries without rows are small; keep their number bounded too.
	if len(l.files) > 4*l.cfg.MaxProcesses {
		for k, e := range l.files {
			if e.refs == 0 && e.state != fileRows && e != fe {
				delete(l.files, k)
			}
		}
	}
	return fe
}

func isPinned(pinned map[*fileEntry]struct{}, fe *fileEntry) bool {
	_, ok := pinned[fe]
	return ok
}

func (l *Loader) touch(fe *fileEntry) {
	if fe.lru != nil {
		l.lru.MoveToFront(fe.lru)
	}
}

// alloc finds room for count rows, evicting the tables used least
// recently.
func (l *Loader) alloc(count uint32) (uint32, bool) {
	for {
		if first, ok := l.arena.alloc(count); ok {
			return first, true
		}
		if l.noEvict {
			return 0, false
		}
		var victim *fileEntry
		for e := l.lru.Back(); e != nil && victim == nil; e = e.Prev() {
			if fe := e.Value.(*fileEntry); !isPinned(l.pinned, fe) {
				victim = fe
			}
		}
		if victim == nil {
			// Room enough in pieces: move the tables together.
			if l.arena.size-l.arena.used >= count && l.compact() {
				continue
			}
			return 0, false
		}
		l.evict(victim)
	}
}

// compact moves every table to the start of the row store so the free room
// is one run. A table moves in three steps (processes marked pending, rows
// written at the new place, processes pointed there), so no walk reads a
// row being overwritten; meanwhile its frames use frame pointers. A table
// the store no longer holds is evicted instead. It reports whether the
// free room is now one run.
func (l *Loader) compact() bool {
	var tables []*fileEntry
	for e := l.lru.Front(); e != nil; e = e.Next() {
		tables = append(tables, e.Value.(*fileEntry))
	}
	sort.Slice(tables, func(i, j int) bool { return tables[i].first < tables[j].first })
	next := uint32(0)
	for _, fe := range tables {
		if fe.first == next {
			next += fe.count
			continue
		}
		e, ok := l.cfg.Tables.Get(fe.key)
		if !ok || e.Table == nil || uint32(len(e.Table.Rows)) != fe.count {
			l.evict(fe)
			continue
		}
		fe.state = filePending
		l.rewrite(fe)
		if err := l.cfg.Sink.WriteUnwindRows(next, e.Table.Rows, fe.base); err != nil {
			l.tableErr.Add(1)
			l.evict(fe)
			continue
		}
		fe.first, fe.state = next, fileRows
		l.rewrite(fe)
		next += fe.count
	}
	l.compactions.Add(1)
	l.arena = newArena(l.arena.size)
	if _, ok := l.arena.alloc(next); !ok {
		return false
	}
	return true
}

// evict frees a file's rows. The processes mapping it are rewritten first,
// with the file pending, so no walk reads rows that are reused.
func (l *Loader) evict(fe *fileEntry) {
	l.lru.Remove(fe.lru)
	fe.lru = nil
	fe.state = filePending
	l.rewrite(fe)
	l.arena.release(fe.first, fe.count)
	fe.first, fe.count = 0, 0
	l.evictions.Add(1)
	l.rowBytes.Store(int64(l.arena.used) * profiler.UnwindRowBytes)
	l.nfiles.Store(int64(l.lru.Len()))
}

// forget drops a process from the sampler and releases its files.
func (l *Loader) forget(pid uint32) {
	if err := l.cfg.Sink.DeleteUnwindMappings(pid); err != nil {
		l.loadErrors.Add(1)
	}
	if pe, ok := l.procs[pid]; ok {
		for fe := range pe.files {
			fe.refs--
		}
		delete(l.procs, pid)
		if l.cfg.Processes != nil {
			l.cfg.Processes.Forgot(pid)
		}
	}
	l.processes.Store(int64(len(l.procs)))
	l.mu.Lock()
	delete(l.lastLoad, pid)
	delete(l.written, pid)
	delete(l.hints, pid)
	l.mu.Unlock()
}

func (l *Loader) makeRoomForProcess() {
	if len(l.procs) < l.cfg.MaxProcesses {
		return
	}
	var oldest uint32
	var at time.Time
	for pid, pe := range l.procs {
		if at.IsZero() || pe.seen.Before(at) {
			oldest, at = pid, pe.seen
		}
	}
	l.forget(oldest)
}

// sweep drops exited processes, reloads exec'd ones, and marks the tables
// of the processes sampled since the last sweep as recently used.
func (l *Loader) sweep() {
	l.mu.Lock()
	seen := l.seen
	l.seen = map[uint32]struct{}{}
	l.mu.Unlock()
	now := time.Now()
	for pid := range seen {
		if pe, ok := l.procs[pid]; ok {
			pe.seen = now
			for fe := range pe.files {
				l.touch(fe)
			}
		}
	}
	// Pending files whose build notice was lost, or that were evicted,
	// take free room only: two processes that do not fit together must
	// not evict each other every sweep.
	l.noEvict = true
	for _, fe := range l.files {
		switch {
		case fe.state == filePending && fe.refs > 0:
			l.materialize(fe)
		case fe.state == fileRows:
			// Built while its debug file was pending: asked again, the
			// store rebuilds it once due, and Built brings it here.
			if e, ok := l.cfg.Tables.Get(fe.key); ok && errors.Is(e.Err, cfi.ErrPending) {
				l.cfg.Tables.Request(fe.key, l.openFile(fe))
			}
		}
	}
	l.noEvict = false
	for pid, pe := range l.procs {
		id, err := identity(pid)
		switch {
		case err != nil:
			l.forget(pid)
		case id != pe.id:
			_ = l.Load(pid)
		}
	}
	l.trimIdle()
}

// trimIdle drops the files no loaded process maps beyond MaxIdleFiles:
// those without rows first (nothing to build again), then those with
// rows, least recently used first. Processes started from fresh files (a
// deployment's new copies) thus leave no trail of entries and rows.
func (l *Loader) trimIdle() {
	idle := 0
	for _, fe := range l.files {
		if fe.refs == 0 {
			idle++
		}
	}
	for key, fe := range l.files {
		if idle <= l.cfg.MaxIdleFiles {
			return
		}
		if fe.refs == 0 && fe.state != fileRows {
			delete(l.files, key)
			idle--
		}
	}
	for e := l.lru.Back(); e != nil && idle > l.cfg.MaxIdleFiles; {
		prev := e.Prev()
		if fe := e.Value.(*fileEntry); fe.refs == 0 {
			l.evict(fe)
			l.evictions.Add(-1) // dropped as idle, not evicted for room
			delete(l.files, fe.key)
			idle--
		}
		e = prev
	}
}
