package process

import (
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/lru"
)

// Snapshots keeps the executable mappings of processes read while they
// lived, and an open file behind each, so that the samples of a process
// that exited before they were read can still be attributed and named.
// A snapshot outlives its process by a fixed time (Linger), then goes.
//
// It is bounded: at most MaxProcesses snapshots taking MaxBytes (the
// oldest, exited ones first, dropped first, counted in Stats.Dropped) and at most MaxFiles open files, shared by all
// snapshots of the same file (a snapshot whose file would exceed the bound
// keeps the mapping without the file, counted in Stats.FilesNotHeld). Safe
// for concurrent use.
type Snapshots struct {
	cfg SnapshotConfig

	mu    sync.Mutex
	procs map[int]*snapshot
	order []*snapshot // oldest first; entries whose pid was taken again are stale
	files map[FileKey]*heldFile
	bytes int64
	stats SnapshotStats
	// expiredAt is when expired snapshots were last dropped.
	expiredAt time.Time
	// seq numbers the snapshots stored, the last one's.
	seq uint64
	// paths names the files Record has seen; containers the cgroups.
	paths      *lru.Cache[FileKey, string]
	containers *lru.Cache[uint64, string]
}

// SnapshotConfig bounds Snapshots.
type SnapshotConfig struct {
	// MaxProcesses bounds the snapshots kept, live or exited. Zero means
	// 4096.
	MaxProcesses int
	// MaxBytes bounds the memory the snapshots take. Zero means 4 MiB.
	MaxBytes int64
	// MaxFiles bounds the files held open. Zero means 256.
	MaxFiles int
	// Linger is how long a snapshot stays after its process exited: one
	// report interval plus the sample read period covers its last samples.
	Linger time.Duration
	// read reads a process's mappings, open opens a mapped file, name
	// names it, and exe and container read its executable and container;
	// tests replace them.
	read           func(pid int) ([]Mapping, error)
	open           func(pid int, m *Mapping) (*os.File, error)
	name           func(pid int, m *Mapping) (string, error)
	exe, container func(pid int) (string, error)
}

// SnapshotStats are the counts of Snapshots.
type SnapshotStats struct {
	// Processes and Files are the snapshots and open files held now,
	// Bytes the memory the snapshots take.
	Processes, Files, Bytes int64
	// Taken counts snapshots read from /proc (Take), Recorded those
	// recorded from what the sampler read (Record); Expired those dropped
	// after their process exited and Linger passed; Dropped those dropped
	// early for room (MaxProcesses, MaxBytes).
	Taken, Recorded, Expired, Dropped int64
	// FilesNotHeld counts mapped files a snapshot could not hold open
	// (MaxFiles reached, or the open failed).
	FilesNotHeld int64
}

// Snapshot is what a process's snapshot tells of it.
type Snapshot struct {
	// Mappings are its executable mappings.
	Mappings []Mapping
	// ExePath is its executable as it saw it; ContainerID its container
	// ("" outside one).
	ExePath, ContainerID string
	// Exec and Exit are when the process exec'd this image and exited,
	// in CLOCK_MONOTONIC nanoseconds (ktime); zero when not known.
	Exec, Exit uint64
}

// Covers reports whether a sample taken at ktime can be of this image of
// the process: not before its exec, not after its exit (a later process
// with the same pid, forked without exec, is not this one). The exit
// event comes early in the exit path, which samples may still catch.
func (s *Snapshot) Covers(ktime uint64) bool {
	return ktime >= s.Exec && (s.Exit == 0 || ktime <= s.Exit+uint64(exitSlack))
}

// exitSlack is how long after its exit event a process may still be sampled.
const exitSlack = 10 * time.Millisecond

type snapshot struct {
	pid   int
	image uint64 // Sighting.Image, 0 when taken from /proc
	Snapshot
	seq      uint64 // Seq of this snapshot
	files    []*heldFile
	exitedAt time.Time // zero while alive
	gone     bool
	cost     int64
}

type heldFile struct {
	f    *os.File
	refs int
}

// NewSnapshots returns an empty store.
func NewSnapshots(cfg SnapshotConfig) *Snapshots {
	if cfg.MaxProcesses <= 0 {
		cfg.MaxProcesses = 4096
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 4 << 20
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 256
	}
	if cfg.read == nil {
		cfg.read = ReadMappings
	}
	if cfg.open == nil {
		cfg.open = OpenMapping
	}
	if cfg.exe == nil {
		cfg.exe = ExecutablePath
	}
	if cfg.container == nil {
		cfg.container = ContainerID
	}
	if cfg.name == nil {
		cfg.name = MappedFileName
	}
	return &Snapshots{
		cfg: cfg, procs: map[int]*snapshot{}, files: map[FileKey]*heldFile{},
		paths:      lru.New[FileKey, string](maxPaths, nil),
		containers: lru.New[uint64, string](maxContainers, nil),
	}
}

// Take reads pid's executable mappings now and keeps them in place of any
// earlier snapshot of pid (an exec replaced the image). exePath is the
// executable as the process sees it, "" to read it; execKtime when it
// exec'd (ktime), 0 if unknown. A process already gone keeps its earlier
// snapshot; Take reports whether it read one.
func (s *Snapshots) Take(pid int, exePath string, execKtime uint64) bool {
	return s.take(pid, exePath, execKtime, nil)
}

// take reads and stores pid's snapshot; with prev set (a re-read) only in
// place of prev, and only while its process has not been seen to exit.
func (s *Snapshots) take(pid int, exePath string, execKtime uint64, prev *snapshot) bool {
	all, err := s.cfg.read(pid)
	if err != nil || len(all) == 0 {
		return false // gone, or a zombie with no mappings left
	}
	if exePath == "" {
		exePath, _ = s.cfg.exe(pid)
	}
	container, _ := s.cfg.container(pid)
	var maps []Mapping
	for _, m := range all {
		if m.Executable() {
			maps = append(maps, m)
		}
	}
	if !s.store(pid, &snapshot{pid: pid, Snapshot: Snapshot{Mappings: maps, ExePath: exePath, ContainerID: container, Exec: execKtime}}, prev) {
		return false
	}
	s.mu.Lock()
	s.stats.Taken++
	s.mu.Unlock()
	return true
}

// store holds snap's files and keeps it as pid's snapshot; with prev set
// only in place of prev, and only while its process has not been seen to
// exit.
func (s *Snapshots) store(pid int, snap *snapshot, prev *snapshot) bool {
	maps := snap.Mappings
	// Files are opened outside the lock; those already held are not, nor
	// those beyond the bound.
	s.mu.Lock()
	var toOpen []int
	room := s.cfg.MaxFiles - len(s.files)
	for i := range maps {
		if maps[i].File() && s.files[maps[i].Key()] == nil && len(toOpen) < room {
			toOpen = append(toOpen, i)
		}
	}
	s.mu.Unlock()
	opened := map[FileKey]*os.File{}
	for _, i := range toOpen {
		m := &maps[i]
		if _, ok := opened[m.Key()]; ok {
			continue
		}
		f, err := s.cfg.open(pid, m)
		if err != nil {
			continue
		}
		// Only the file the process mapped is held: a path replaced since
		// names another.
		if id, err := StatFile(f); err != nil || id.FileKey != m.Key() {
			f.Close()
			continue
		}
		opened[m.Key()] = f
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if prev != nil && (s.procs[pid] != prev || !prev.exitedAt.IsZero()) {
		for _, f := range opened {
			f.Close()
		}
		return false // exited, or exec'd again, since the re-read began
	}
	for i := range maps {
		m := &maps[i]
		if !m.File() || hasFile(snap.files, s.files[m.Key()]) {
			continue
		}
		hf := s.files[m.Key()]
		if hf == nil {
			f := opened[m.Key()]
			if f == nil {
				s.stats.FilesNotHeld++
				continue
			}
			if len(s.files) >= s.cfg.MaxFiles {
				s.stats.FilesNotHeld++
				continue
			}
			delete(opened, m.Key())
			hf = &heldFile{f: f}
			s.files[m.Key()] = hf
		}
		if hasFile(snap.files, hf) {
			continue
		}
		hf.refs++
		snap.files = append(snap.files, hf)
	}
	for _, f := range opened {
		f.Close() // raced with another Take of the same file, or over the bound
	}
	if old := s.procs[pid]; old != nil {
		delete(s.procs, pid)
		s.release(old)
	}
	snap.cost = snapshotCost(snap)
	for len(s.procs) >= s.cfg.MaxProcesses || s.bytes+snap.cost > s.cfg.MaxBytes {
		if !s.dropOldest() {
			break
		}
	}
	s.bytes += snap.cost
	s.seq++
	snap.seq = s.seq
	s.procs[pid] = snap
	s.order = append(s.order, snap)
	s.compactOrder()
	return true
}

func hasFile(files []*heldFile, hf *heldFile) bool {
	for _, f := range files {
		if f == hf {
			return true
		}
	}
	return false
}

// Refresh reads pid's mappings again if it has a snapshot and has not
// exited, keeping the earlier read if it is gone now.
func (s *Snapshots) Refresh(pid int) {
	s.mu.Lock()
	snap := s.procs[pid]
	live := snap != nil && snap.exitedAt.IsZero()
	s.mu.Unlock()
	if live {
		s.take(pid, snap.ExePath, snap.Exec, snap)
	}
}

// Exited notes that pid exited at now (exitKtime in ktime, 0 if unknown):
// its snapshot goes once Linger has passed.
func (s *Snapshots) Exited(pid int, now time.Time, exitKtime uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap := s.procs[pid]; snap != nil && snap.exitedAt.IsZero() {
		snap.exitedAt, snap.Exit = now, exitKtime
	}
	// Each exit would scan every snapshot: a tenth of a second late is
	// close enough.
	if now.Sub(s.expiredAt) >= 100*time.Millisecond {
		s.expire(now)
	}
}

// Expire drops the snapshots whose process exited more than Linger before
// now.
func (s *Snapshots) Expire(now time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
}

func (s *Snapshots) expire(now time.Time) {
	s.expiredAt = now
	for pid, snap := range s.procs {
		if !snap.exitedAt.IsZero() && now.Sub(snap.exitedAt) > s.cfg.Linger {
			delete(s.procs, pid)
			s.release(snap)
			s.stats.Expired++
		}
	}
	s.compactOrder()
}

// snapshotCost estimates the bytes snap takes.
func snapshotCost(snap *snapshot) int64 {
	n := int64(unsafe.Sizeof(*snap)) + int64(len(snap.ExePath)+len(snap.ContainerID)) + int64(cap(snap.files))*8
	for i := range snap.Mappings {
		n += int64(unsafe.Sizeof(snap.Mappings[i])) + int64(len(snap.Mappings[i].Path)+len(snap.Mappings[i].Perms))
	}
	return n
}

// dropOldest drops the oldest snapshot, exited ones first, and reports
// whether there was one; s.mu is held.
func (s *Snapshots) dropOldest() bool {
	victim := (*snapshot)(nil)
	for _, snap := range s.order {
		if snap.gone {
			continue
		}
		if !snap.exitedAt.IsZero() {
			victim = snap
			break
		}
		if victim == nil {
			victim = snap
		}
	}
	if victim == nil {
		return false
	}
	delete(s.procs, victim.pid)
	s.release(victim)
	s.stats.Dropped++
	s.compactOrder()
	return true
}

// release lets go of snap's files; s.mu is held.
func (s *Snapshots) release(snap *snapshot) {
	snap.gone = true
	s.bytes -= snap.cost
	for _, hf := range snap.files {
		if hf.refs--; hf.refs == 0 {
			for k, v := range s.files {
				if v == hf {
					delete(s.files, k)
				}
			}
			hf.f.Close()
		}
	}
	snap.files = nil
}

// compactOrder removes released snapshots from order once they are half
// of it, so it stays within twice the snapshots held.
func (s *Snapshots) compactOrder() {
	if len(s.order) < 2*len(s.procs)+16 {
		return
	}
	kept := s.order[:0]
	for _, snap := range s.order {
		if !snap.gone {
			kept = append(kept, snap)
		}
	}
	clear(s.order[len(kept):])
	s.order = kept
}

// Seq returns the number of pid's snapshot, which a later one of pid
// (more mappings read, an exec) exceeds; 0 when pid has none. A reader of
// snapshots compares it with the one it read to know it is stale.
func (s *Snapshots) Seq(pid int) uint64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap := s.procs[pid]; snap != nil {
		return snap.seq
	}
	return 0
}

// Get returns pid's snapshot if it covers a sample taken at ktime (0: any
// time). Its Mappings must not be modified.
func (s *Snapshots) Get(pid int, ktime uint64) (Snapshot, bool) {
	if s == nil {
		return Snapshot{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := s.procs[pid]
	if snap == nil || (ktime != 0 && !snap.Covers(ktime)) {
		return Snapshot{}, false
	}
	return snap.Snapshot, true
}

// Open opens the file behind mapping m of pid as OpenMapping does, and when
// the process is gone returns a new descriptor of the file a snapshot
// holds for the same device and inode. Nothing is opened by path: the
// held file is the one the process mapped.
func (s *Snapshots) Open(pid int, m *Mapping) (*os.File, error) {
	if s == nil {
		return OpenMapping(pid, m)
	}
	f, err := s.cfg.open(pid, m)
	if err == nil {
		return f, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	hf := s.files[m.Key()]
	if hf == nil {
		return nil, err
	}
	return DupFile(hf.f)
}

// Stats returns the store's counts; a nil store has none.
func (s *Snapshots) Stats() SnapshotStats {
	if s == nil {
		return SnapshotStats{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Processes, st.Files, st.Bytes = int64(len(s.procs)), int64(len(s.files)), s.bytes
	return st
}

// Close closes every held file.
func (s *Snapshots) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, snap := range s.procs {
		delete(s.procs, pid)
		s.release(snap)
	}
	s.order = nil
	return nil
}
