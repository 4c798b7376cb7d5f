package aggregate

import (
	"path/filepath"
	"time"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/process"
)

// missRefreshInterval rate-limits re-reading a process's mappings when a
// sample falls outside all of them (a new library, or a JIT region) and
// the last such read did not cover its sample. A read that did is not
// waited for: the next new mapping may come a moment later (a runtime
// maps its JIT code just after start), and until it is read every sample
// in it loses its whole user stack.
const missRefreshInterval = time.Second

type processEntry struct {
	proc       *Process
	generation uint64
	readAt     time.Time
	// missedAt is when a read for a sample outside the mappings last
	// found no mapping for it either (the process is gone, or unmapped
	// it).
	missedAt time.Time
}

// processTable caches process metadata by pid. On its first sample of each
// interval an entry checks that the executable is unchanged (one readlink,
// which catches exec and most pid reuse); it is read again from /proc when
// the executable changed, or when a sample falls outside its mappings
// (each new mapping costs one read; reads that find nothing new are
// rate-limited).
type processTable struct {
	max     int
	read    func(pid int) (*Process, error)
	exePath func(pid int) (string, error)
	// snapshotted reports whether a process never read may be read from
	// a snapshot: its first sample, from before its exec, found none.
	snapshotted func(pid int) bool
	entries     map[int]*processEntry
	generation  uint64
	// missed is set while a process is read again for a sample outside
	// its mappings: from /proc first, where a snapshot may not have
	// caught up yet.
	missed bool
}

func newProcessTable(max int, read func(int) (*Process, error)) *processTable {
	return &processTable{max: max, read: read, exePath: process.ExecutablePath, entries: map[int]*processEntry{}, generation: 1}
}

// execChanged reports whether the process now runs another executable than
// when it was read. A process that is gone keeps its last read.
func (t *processTable) execChanged(pid int, e *processEntry) bool {
	if e.proc == nil {
		return true
	}
	exe, err := t.exePath(pid)
	return err == nil && exe != e.proc.ExePath
}

// lookup returns the process, or nil when it could never be read.
func (t *processTable) lookup(pid int, ip uint64) *Process {
	e, ok := t.entries[pid]
	switch {
	case !ok:
		e = &processEntry{}
		t.makeRoom()
		t.entries[pid] = e
		t.refresh(pid, e)
	case e.generation != t.generation && t.execChanged(pid, e):
		t.refresh(pid, e)
	case e.proc == nil && t.snapshotted != nil && t.snapshotted(pid):
		t.refresh(pid, e)
	case ip != 0 && e.proc != nil && e.proc.Mapping(ip) == nil && time.Since(e.missedAt) > missRefreshInterval:
		t.missed = true
		t.refresh(pid, e)
		t.missed = false
		if e.proc.Mapping(ip) == nil {
			e.missedAt = e.readAt
		}
	}
	e.generation = t.generation
	return e.proc
}

func (t *processTable) refresh(pid int, e *processEntry) {
	e.readAt = time.Now()
	if p, err := t.read(pid); err == nil {
		e.proc = p
	}
	// On error (the process is usually gone) the last good read stays.
}

// makeRoom evicts processes not seen this interval, then any, to stay
// within max.
func (t *processTable) makeRoom() {
	if len(t.entries) < t.max {
		return
	}
	for pid, e := range t.entries {
		if e.generation != t.generation {
			delete(t.entries, pid)
		}
	}
	for pid := range t.entries {
		if len(t.entries) < t.max {
			break
		}
		delete(t.entries, pid)
	}
}

// endInterval forgets processes not seen during the interval that ended.
func (t *processTable) endInterval() {
	for pid, e := range t.entries {
		if e.generation != t.generation {
			delete(t.entries, pid)
		}
	}
	t.generation++
}

// readProcess returns pid as the snapshot the sampler's notice recorded
// shows it, when one covers ktime (when the sample that asked was taken):
// its mappings were read once, at its first sample, and are not read
// again. Without one, or when fresh (a sample outside the mappings),
// /proc is read; a process gone (or a zombie, whose mappings are gone) is
// then taken from its snapshot, if one covers ktime.
func readProcess(pid int, snaps *process.Snapshots, ktime uint64, fresh bool) (*Process, error) {
	fromSnapshot := func() *Process {
		snap, ok := snaps.Get(pid, ktime)
		if !ok {
			return nil
		}
		p := newProcess(pid, snap.Mappings, snap.ExePath)
		p.ContainerID = snap.ContainerID
		return p
	}
	if !fresh {
		if p := fromSnapshot(); p != nil {
			return p, nil
		}
	}
	maps, err := process.ReadMappings(pid)
	if err != nil || len(maps) == 0 {
		if p := fromSnapshot(); p != nil {
			return p, nil
		}
		if err != nil {
			return nil, err
		}
	}
	exe, _ := process.ExecutablePath(pid)
	p := newProcess(pid, maps, exe)
	p.ContainerID, _ = process.ContainerID(pid)
	return p, nil
}

func newProcess(pid int, maps []process.Mapping, exe string) *Process {
	var exec []frame.Mapping
	for _, m := range maps {
		if m.Executable() {
			exec = append(exec, frame.Mapping{Mapping: m})
		}
	}
	p := &Process{PID: pid, Mappings: exec, ExePath: exe}
	if exe != "" {
		p.ExeName = filepath.Base(exe)
	}
	return p
}
