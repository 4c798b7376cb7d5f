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
	// snapshot is the Seq of the process's snapshot when it was read.
	snapshot uint64
	// missedAt is when a read for a sample outside the mappings last
	// found no mapping for it either (the process is gone, or unmapped
	// it).
	missedAt time.Time
}

// processTable caches process metadata by pid. An entry is read again
// when the process has a newer snapshot (the sampler read its mappings
// again: a library mapped after its first sample, an exec); on its first
// sample of each interval it checks that the executable is unchanged (one
// readlink, which catches exec and most pid reuse); and it is read again
// from /proc when a sample's leaf falls outside its mappings (each new
// mapping costs one read; reads that find nothing new are rate-limited).
type processTable struct {
	max     int
	read    func(pid int) (*Process, error)
	exePath func(pid int) (string, error)
	// snapshot returns the Seq of pid's snapshot (process.Snapshots),
	// 0 for none; nil without snapshots.
	snapshot   func(pid int) uint64
	entries    map[int]*processEntry
	generation uint64
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
	case t.snapshot != nil && t.snapshot(pid) != e.snapshot:
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
	var seq uint64
	if t.snapshot != nil {
		seq = t.snapshot(pid)
	}
	if p, err := t.read(pid); err == nil {
		e.proc, e.snapshot = p, seq
	}
	// On error (the process is usually gone; its snapshot, if any, is of
	// another image than the sample's) the last good read stays, and the
	// next sample tries again.
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
	p := &Process{PID: pid, Mappings: exec, Info: process.Info{ExePath: exe}}
	if exe != "" {
		p.ExeName = filepath.Base(exe)
	}
	return p
}
