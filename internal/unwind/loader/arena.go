package loader

import "sort"

// extent is a run of rows [first, first+count) in the row store.
type extent struct{ first, count uint32 }

// arena hands out runs of the fixed-size BPF row store. Freed runs merge
// with their neighbours, so a store emptied by evictions is whole again.
type arena struct {
	size uint32
	free []extent // sorted by first, never adjacent
	used uint32
}

func newArena(size uint32) *arena {
	a := &arena{size: size}
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

// release gives a run back.
func (a *arena) release(first, count uint32) {
	if count == 0 {
		return
	}
	a.used -= count
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
