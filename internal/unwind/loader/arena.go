package loader

import (
	"sort"
	"time"
)

// extent is a run of rows [first, first+count) in the row store.
type extent struct{ first, count uint32 }

// arena hands out runs of the fixed-size BPF row store. Freed runs merge
// with their neighbours, so a store emptied by evictions is whole again.
// A run freed while walks may still read it (its file's entry was just
// withdrawn) waits out a quarantine before it is handed out again.
type arena struct {
	size uint32
	free []extent // sorted by first, never adjacent
	used uint32   // rows handed out
	// quarantine is how long a withdrawn run waits; held are those
	// waiting, oldest first.
	quarantine time.Duration
	held       []heldExtent
}

type heldExtent struct {
	extent
	until time.Time
}

func newArena(size uint32, quarantine time.Duration) *arena {
	a := &arena{size: size, quarantine: quarantine}
	if size > 0 {
		a.free = []extent{{0, size}}
	}
	return a
}

// alloc returns the first free run of count rows that fits.
func (a *arena) alloc(count uint32) (uint32, bool) {
	if count == 0 {
		return 0, true
	}
	a.expire(time.Now())
	for i, e := range a.free {
		if e.count < count {
			continue
		}
		first := e.first
		if e.count == count {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = extent{e.first + count, e.count - count}
		}
		a.used += count
		return first, true
	}
	return 0, false
}

// release gives a run back: at once, or after the quarantine when walks
// may still read it.
func (a *arena) release(first, count uint32, quarantined bool) {
	if count == 0 {
		return
	}
	a.used -= count
	if quarantined && a.quarantine > 0 {
		a.held = append(a.held, heldExtent{extent{first, count}, time.Now().Add(a.quarantine)})
		return
	}
	a.insert(first, count)
}

// expire frees the quarantined runs whose time is up.
func (a *arena) expire(now time.Time) {
	n := 0
	for n < len(a.held) && !a.held[n].until.After(now) {
		a.insert(a.held[n].first, a.held[n].count)
		n++
	}
	a.held = append(a.held[:0], a.held[n:]...)
}

// waitQuarantine waits for the oldest quarantined run, when the runs held
// could make room for count rows. It reports whether it freed any.
func (a *arena) waitQuarantine(count uint32) bool {
	if len(a.held) == 0 || a.size-a.used < count {
		return false
	}
	time.Sleep(time.Until(a.held[0].until))
	a.expire(time.Now())
	return true
}

// reserve takes the run [first, first+count), which must be free.
func (a *arena) reserve(first, count uint32) {
	for i, e := range a.free {
		if first < e.first || first+count > e.first+e.count {
			continue
		}
		var parts []extent
		if first > e.first {
			parts = append(parts, extent{e.first, first - e.first})
		}
		if end := e.first + e.count; first+count < end {
			parts = append(parts, extent{first + count, end - first - count})
		}
		a.free = append(a.free[:i], append(parts, a.free[i+1:]...)...)
		a.used += count
		return
	}
}

// contiguous reports whether the free room is one run (or none).
func (a *arena) contiguous() bool { return len(a.free) <= 1 && len(a.held) == 0 }

// insert adds a free run, merged with its neighbours.
func (a *arena) insert(first, count uint32) {
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].first > first })
	a.free = append(a.free, extent{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = extent{first, count}
	// Merge with the next run, then with the previous one.
	if i+1 < len(a.free) && a.free[i].first+a.free[i].count == a.free[i+1].first {
		a.free[i].count += a.free[i+1].count
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].first+a.free[i-1].count == a.free[i].first {
		a.free[i-1].count += a.free[i].count
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}
