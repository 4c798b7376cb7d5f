package loader

import (
	"debug/elf"
	"errors"
	"math"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// fileState is where a file's table is.
type fileState uint8

const (
	// filePending: the table is being built; frame pointers meanwhile.
	filePending fileState = iota
	// fileRows: the table is in the row store.
	fileRows
	// fileFramePointers: no usable CFI (none, Go, too large, not the file
	// mapped); frame pointers for good.
	fileFramePointers
)

// fileEntry is one file a walk asked a table for.
//
// Tables are keyed by file (device and inode), never by build id as the
// symbolizer shares a Binary between copies of one build: CFI rows decide
// which words of a process's stack the BPF walk reads and reports as
// return addresses, and a file made by one user to carry another's build
// id must not decide that for the other user's processes.
type fileEntry struct {
	key   process.FileKey
	state fileState
	first uint32 // rows [first, first+count) of the store
	count uint32
	// table is the room the rows take in the store, with their index:
	// slots [first, first+table.Slots).
	table profiler.UnwindTable
	// rowBase is the file offset the rows' PCs are relative to.
	rowBase uint64
	// addrs places the file's rows, at ELF virtual addresses, at offsets.
	addrs *elfbin.AddressMapper
	// held is the file, open while its table may be built (again): the
	// process it was opened through may exit before the build runs.
	held *os.File
	// pid mapped the file at [start, end) when a walk last asked for it:
	// where it is opened again, to build a table evicted meanwhile.
	pid        uint32
	start, end uint64
	// used is when a walk last read its table (the sampler's stamp, in
	// about seconds), as last read; seen is when the loader last heard of
	// the file.
	used uint32
	seen time.Time
}

// tableSet is the files' tables: their entries, and the row store they
// share. Owned by the Run goroutine.
type tableSet struct {
	cfg   *Config
	arena *arena
	files map[process.FileKey]*fileEntry

	nfiles, rowBytes, evictions, tableErr, compactions atomic.Int64
}

func newTableSet(cfg *Config) *tableSet {
	return &tableSet{
		cfg:   cfg,
		arena: newArena(cfg.Sink.UnwindRowCapacity(), cfg.Quarantine),
		files: map[process.FileKey]*fileEntry{},
	}
}

// request serves a walk of pid that entered m, whose file has no table in
// the sampler: the file is opened through pid now, while it maps it, and
// its table built. A file the loader knows already (the sampler lost its
// entry) is set again.
func (t *tableSet) request(pid uint32, m *profiler.UnwindMapping) {
	key := m.File
	now := stampNow()
	if fe := t.files[key]; fe != nil {
		fe.pid, fe.start, fe.end, fe.used, fe.seen = pid, m.Start, m.End, now, time.Now()
		if fe.state == filePending {
			t.materialize(fe)
		}
		t.publish(fe)
		return
	}
	f, err := process.OpenMappedFile(int(pid), m.Start, m.End, key)
	if errors.Is(err, process.ErrOtherFile) {
		// Mapped again since, or a file the kernel names otherwise
		// than /proc does: frame pointers, rather than asking at
		// every walk.
		t.tableErr.Add(1)
		t.add(&fileEntry{key: key, state: fileFramePointers, used: now, seen: time.Now()})
		return
	}
	if err != nil {
		// Gone: the next walk in the file asks again, through a
		// process that maps it.
		_ = t.cfg.Sink.DeleteUnwindFile(key)
		return
	}
	fe := &fileEntry{key: key, pid: pid, start: m.Start, end: m.End, used: now, seen: time.Now()}
	inspect(fe, f)
	t.add(fe)
	if fe.state == filePending {
		t.materialize(fe)
	}
}

// stampNow is the sampler's use stamp of now (ktime >> 30).
func stampNow() uint32 { return uint32(ktime.MonotonicNanos() >> 30) }

// staler reports whether a was walked at least two stamps (about two
// seconds) before b: tables walked about as recently as the one that
// needs room are not evicted for it, so that two processes whose tables
// do not fit together keep some pending rather than evict each other.
func staler(a, b uint32) bool { return int32(b-a) >= 2 }

// add keeps fe, within MaxFiles, and tells the sampler where it stands.
func (t *tableSet) add(fe *fileEntry) {
	if len(t.files) >= t.cfg.MaxFiles {
		t.dropLeastUsed(len(t.files) - t.cfg.MaxFiles + 1)
	}
	t.files[fe.key] = fe
	t.publish(fe)
}

// publish writes fe's state into the sampler. A file whose state cannot
// be written is forgotten, and asked for again by the next walk.
func (t *tableSet) publish(fe *fileEntry) {
	f := profiler.UnwindFile{State: profiler.FilePending}
	switch fe.state {
	case fileRows:
		f = profiler.UnwindFile{State: profiler.FileCFI, RowBase: fe.rowBase, RowFirst: fe.first, RowCount: fe.count,
			Index: fe.table.Index}
	case fileFramePointers:
		f.State = profiler.FileFramePointers
	}
	if err := t.cfg.Sink.SetUnwindFile(fe.key, f); err != nil {
		t.tableErr.Add(1)
		t.forget(fe)
	}
}

// inspect reads f, fe's file: whether it has a table to build. It keeps f
// open as fe.held while the table may be built, and closes it otherwise.
func inspect(fe *fileEntry, f *os.File) {
	fe.state = fileFramePointers
	ef, err := elf.NewFile(f)
	if err != nil {
		f.Close()
		return
	}
	// Go keeps frame pointers everywhere, and its CFI says nothing about
	// FP: frame pointers are exact there.
	goBinary := elfbin.IsGo(ef, elfbin.ReadBuildIDs(ef, f))
	fe.addrs = elfbin.NewAddressMapper(ef.Progs)
	ef.Close()
	if goBinary || !fe.addrs.HasExec() {
		f.Close()
		return
	}
	fe.state, fe.held = filePending, f
}

// opener returns the table build's opener of fe: a new descriptor of the
// file held open.
func opener(fe *fileEntry) func() (*os.File, error) {
	held := fe.held
	return func() (*os.File, error) {
		if held == nil {
			return nil, os.ErrClosed
		}
		return process.DupFile(held)
	}
}

// materialize puts a pending file's table into the row store when it is
// built, and asks for it otherwise.
func (t *tableSet) materialize(fe *fileEntry) {
	e, ok := t.cfg.Tables.Get(fe.key)
	if !ok {
		if fe.held == nil && !t.reopen(fe) {
			// Nothing to build it from: asked for again by the next
			// walk, through its own process.
			t.forget(fe)
			return
		}
		t.cfg.Tables.Request(fe.key, opener(fe))
		return
	}
	if e.Table == nil || len(e.Table.Rows) == 0 {
		if e.Err != nil {
			t.tableErr.Add(1)
		}
		if errors.Is(e.Err, cfi.ErrPending) && fe.held != nil {
			t.cfg.Tables.Request(fe.key, opener(fe)) // built again once fetched
			return
		}
		t.setFramePointers(fe)
		return
	}
	rows, base, ok := fileOffsetRows(e.Table.Rows, fe.addrs)
	if !ok || rows[len(rows)-1].PC-rows[0].PC > math.MaxUint32 {
		t.tableErr.Add(1)
		t.setFramePointers(fe)
		return
	}
	table := profiler.LayOutUnwindTable(rows, rows[0].PC)
	if uint64(table.Slots) > uint64(t.arena.size) {
		t.tableErr.Add(1)
		t.setFramePointers(fe)
		return
	}
	first, ok := t.alloc(table.Slots, fe)
	if !ok {
		return // pending: the sweep retries it with free room
	}
	if err := t.cfg.Sink.WriteUnwindRows(first, rows, rows[0].PC); err != nil {
		t.arena.release(first, table.Slots, false)
		t.tableErr.Add(1)
		return
	}
	fe.state, fe.first, fe.count, fe.table, fe.rowBase = fileRows, first, uint32(len(rows)), table, base
	// Kept open while a rebuild may still fill the table from its debug
	// file.
	if !errors.Is(e.Err, cfi.ErrPending) {
		fe.closeHeld()
	}
	if r, ok := t.cfg.Tables.(releaser); ok && t.cfg.ReleaseLoaded {
		r.Release(fe.key, e)
	}
	t.counted()
	t.publish(fe)
}

// reopen opens fe's file again through the process that last asked for
// it, to build a table evicted since (or released once loaded).
func (t *tableSet) reopen(fe *fileEntry) bool {
	if fe.pid == 0 {
		return false
	}
	f, err := process.OpenMappedFile(int(fe.pid), fe.start, fe.end, fe.key)
	if err != nil {
		return false
	}
	fe.held = f
	return true
}

func (t *tableSet) setFramePointers(fe *fileEntry) {
	fe.state = fileFramePointers
	fe.closeHeld()
	t.publish(fe)
}

// closeFiles closes every file held open for a build.
func (t *tableSet) closeFiles() {
	for _, fe := range t.files {
		fe.closeHeld()
	}
}

func (fe *fileEntry) closeHeld() {
	if fe.held != nil {
		fe.held.Close()
		fe.held = nil
	}
}

// counted refreshes the counts Stats reads.
func (t *tableSet) counted() {
	n := 0
	for _, fe := range t.files {
		if fe.state == fileRows {
			n++
		}
	}
	t.nfiles.Store(int64(n))
	t.rowBytes.Store(int64(t.arena.used) * profiler.UnwindRowBytes)
}

// rebuilt loads a table that was built: a pending file's first one, or a
// better one (filled from a debug file fetched meanwhile) for a file
// whose table is loaded.
func (t *tableSet) rebuilt(key process.FileKey) {
	fe, ok := t.files[key]
	if !ok {
		return
	}
	if fe.state == fileRows {
		e, ok := t.cfg.Tables.Get(key)
		if !ok || e.Table == nil || len(e.Table.Rows) == int(fe.count) {
			if ok && !errors.Is(e.Err, cfi.ErrPending) {
				fe.closeHeld()
			}
			return
		}
		// Replaced: pending until the new rows are in.
		t.unload(fe)
	}
	if fe.state == filePending {
		t.materialize(fe)
	}
}

// unload frees fe's rows, marking it pending in the sampler first, so
// that no walk reads rows that are reused.
func (t *tableSet) unload(fe *fileEntry) {
	fe.state = filePending
	t.publish(fe)
	t.arena.release(fe.first, fe.table.Slots, true)
	fe.first, fe.count, fe.table = 0, 0, profiler.UnwindTable{}
	t.counted()
}

// forget drops fe, its rows and its entry in the sampler: the next walk
// that enters the file asks for it again.
func (t *tableSet) forget(fe *fileEntry) {
	_ = t.cfg.Sink.DeleteUnwindFile(fe.key)
	if fe.state == fileRows {
		t.arena.release(fe.first, fe.table.Slots, true)
	}
	fe.closeHeld()
	delete(t.files, fe.key)
	t.counted()
}

// refreshUse reads when walks last read each table.
func (t *tableSet) refreshUse() {
	use, err := t.cfg.Sink.UnwindFileUse()
	if err != nil {
		return
	}
	for key, used := range use {
		if fe := t.files[key]; fe != nil {
			fe.used = used
		}
	}
}

// any reports whether an entry passes keep.
func (t *tableSet) any(keep func(*fileEntry) bool) bool {
	for _, fe := range t.files {
		if keep(fe) {
			return true
		}
	}
	return false
}

// count returns how many entries pass keep.
func (t *tableSet) count(keep func(*fileEntry) bool) int {
	n := 0
	for _, fe := range t.files {
		if keep(fe) {
			n++
		}
	}
	return n
}

// byUse returns the entries that pass keep, walked least recently first.
func (t *tableSet) byUse(keep func(*fileEntry) bool) []*fileEntry {
	var out []*fileEntry
	for _, fe := range t.files {
		if keep(fe) {
			out = append(out, fe)
		}
	}
	// Stamps wrap after 2^32 seconds: compared as a distance.
	sort.Slice(out, func(i, j int) bool {
		if d := int32(out[i].used - out[j].used); d != 0 {
			return d < 0
		}
		return out[i].seen.Before(out[j].seen)
	})
	return out
}

// dropLeastUsed forgets the n entries walked least recently.
func (t *tableSet) dropLeastUsed(n int) {
	t.refreshUse()
	for _, fe := range t.byUse(func(*fileEntry) bool { return true }) {
		if n <= 0 {
			return
		}
		t.forget(fe)
		n--
	}
}

// alloc finds room for count rows of fe's table, evicting the tables
// walked least recently, if staler than fe's.
func (t *tableSet) alloc(count uint32, fe *fileEntry) (uint32, bool) {
	if first, ok := t.arena.alloc(count); ok {
		return first, true
	}
	t.refreshUse()
	victims := t.byUse(func(v *fileEntry) bool { return v.state == fileRows && v != fe && staler(v.used, fe.used) })
	for {
		if first, ok := t.arena.alloc(count); ok {
			return first, true
		}
		if t.arena.waitQuarantine(count) {
			continue
		}
		if len(victims) == 0 {
			// Room enough in pieces: move the tables together.
			if t.arena.size-t.arena.used >= count && t.compact() {
				continue
			}
			return 0, false
		}
		t.evict(victims[0])
		victims = victims[1:]
	}
}

// evict frees a table's rows to make room. Its file stays known, pending
// in the sampler: a sweep loads it again once room can be made for it.
func (t *tableSet) evict(fe *fileEntry) {
	t.unload(fe)
	t.evictions.Add(1)
}

// compact moves every table to the start of the row store so the free
// room is one run. The tables that move are marked pending first, and
// their rows rewritten only once the quarantine passed, so that no walk
// reads a row being overwritten; meanwhile their frames use frame
// pointers. A table the store no longer holds is forgotten instead. It
// reports whether the free room is now one run.
func (t *tableSet) compact() bool {
	var tables []*fileEntry
	for _, fe := range t.files {
		if fe.state == fileRows {
			tables = append(tables, fe)
		}
	}
	sort.Slice(tables, func(i, j int) bool { return tables[i].first < tables[j].first })
	type move struct {
		fe   *fileEntry
		rows []cfi.Row
		to   uint32
	}
	var moves []move
	next := uint32(0)
	for _, fe := range tables {
		if fe.first == next {
			next += fe.table.Slots
			continue
		}
		e, ok := t.cfg.Tables.Get(fe.key)
		if !ok || e.Table == nil {
			t.evict(fe) // built again by a sweep
			continue
		}
		rows, _, ok := fileOffsetRows(e.Table.Rows, fe.addrs)
		if !ok || uint32(len(rows)) != fe.count {
			t.evict(fe)
			continue
		}
		fe.state = filePending
		t.publish(fe)
		moves = append(moves, move{fe, rows, next})
		next += fe.table.Slots
	}
	if len(moves) > 0 {
		time.Sleep(t.cfg.Quarantine)
	}
	for _, mv := range moves {
		if err := t.cfg.Sink.WriteUnwindRows(mv.to, mv.rows, mv.rows[0].PC); err != nil {
			t.tableErr.Add(1)
			mv.fe.state = fileRows // for forget to count its rows out
			t.forget(mv.fe)
			continue
		}
		mv.fe.first, mv.fe.state = mv.to, fileRows
		t.publish(mv.fe)
	}
	t.compactions.Add(1)
	t.arena = newArena(t.arena.size, t.cfg.Quarantine)
	for _, fe := range t.files {
		if fe.state == fileRows {
			t.arena.reserve(fe.first, fe.table.Slots)
		}
	}
	t.counted()
	return t.arena.contiguous()
}

// sweep loads the pending files whose build notice was lost, that found
// no room, or that were evicted, asks again for the tables built while
// their debug file was pending, and drops idle files.
func (t *tableSet) sweep() {
	t.arena.expire(time.Now())
	isPending := func(fe *fileEntry) bool { return fe.state == filePending }
	if t.any(isPending) {
		t.refreshUse() // the stalest first
	}
	for _, fe := range t.byUse(isPending) {
		t.materialize(fe)
	}
	for _, fe := range t.files {
		if fe.state == fileRows && fe.held != nil {
			if e, ok := t.cfg.Tables.Get(fe.key); ok && errors.Is(e.Err, cfi.ErrPending) {
				t.cfg.Tables.Request(fe.key, opener(fe))
			}
		}
	}
	t.trimIdle()
}

// trimIdle drops the files no walk read for IdleAfter: those without rows
// (pending ones hold their file open), and those with rows beyond
// MaxIdleFiles, walked least recently first. Processes started from fresh
// copies of a binary (a deployment's) leave no trail of rows.
func (t *tableSet) trimIdle() {
	now := stampNow()
	idleAfter := uint32(t.cfg.IdleAfter.Nanoseconds() >> 30)
	isIdle := func(fe *fileEntry) bool {
		return time.Since(fe.seen) >= t.cfg.IdleAfter && int32(now-fe.used) >= int32(idleAfter)
	}
	// A stamp held is the map's as last read (walks only move it later)
	// or the time of a mapping, which holds seen back as long: a file not
	// idle by them is not idle by the map's. The map (a walk over all its
	// buckets) is read only when some file would go by them.
	wouldGo := t.any(func(fe *fileEntry) bool { return fe.state != fileRows && isIdle(fe) }) ||
		t.count(func(fe *fileEntry) bool { return fe.state == fileRows && isIdle(fe) }) > t.cfg.MaxIdleFiles
	if !wouldGo {
		return
	}
	t.refreshUse()
	for _, fe := range t.byUse(func(fe *fileEntry) bool { return fe.state != fileRows && isIdle(fe) }) {
		t.forget(fe)
	}
	idle := t.byUse(func(fe *fileEntry) bool { return fe.state == fileRows && isIdle(fe) })
	for len(idle) > t.cfg.MaxIdleFiles {
		t.forget(idle[0])
		idle = idle[1:]
	}
}
