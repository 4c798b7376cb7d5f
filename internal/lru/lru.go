// Package lru is the one bounded cache of bpfcol: a least-recently-used map
// bounded by a cost (a count of entries, or bytes), whose size, hits and
// evictions are visible so that every cache can be published as a metric.
package lru

import (
	"container/list"
	"sync"
	"time"
)

// Stats are a cache's counts since it was created.
type Stats struct {
	// Len is the number of entries held now.
	Len int
	// Cost is the summed cost of the entries held now.
	Cost int64
	// MaxCost is the bound on Cost.
	MaxCost int64
	// Hits and Misses count Get calls.
	Hits, Misses uint64
	// Evictions counts entries removed to stay within MaxCost.
	Evictions uint64
	// Expired counts entries removed for being idle longer than MaxIdle.
	Expired uint64
}

type entry[K comparable, V any] struct {
	key   K
	value V
	cost  int64
	used  int64 // when last added or got, in the cache's clock (nanoseconds)
}

// Cache is a least-recently-used map bounded by the sum of its entries'
// costs. It is safe for concurrent use.
type Cache[K comparable, V any] struct {
	mu      sync.Mutex
	maxCost int64
	costOf  func(K, V) int64
	onEvict func(K, V)
	order   *list.List // front is the most recently used
	items   map[K]*list.Element
	stats   Stats
	// maxIdle, when not zero, is how long an entry stays unused before
	// it is removed (SetMaxIdle); now is the clock it is measured with.
	maxIdle time.Duration
	now     func() time.Time
}

// New returns a cache holding entries whose summed cost is at most maxCost.
// costOf gives an entry's cost; nil makes every entry cost 1, so maxCost is
// a count. A maxCost below 1 is taken as 1.
func New[K comparable, V any](maxCost int64, costOf func(K, V) int64) *Cache[K, V] {
	if maxCost < 1 {
		maxCost = 1
	}
	return &Cache[K, V]{
		maxCost: maxCost,
		costOf:  costOf,
		order:   list.New(),
		items:   make(map[K]*list.Element),
		now:     time.Now,
	}
}

// ChurnIdle is the SetMaxIdle bound of the caches whose keys pass with
// the processes of a host (files, addresses, kernel paths): long enough to
// keep what the running processes use from report to report, short enough
// that what exited ones used is gone within minutes.
const ChurnIdle = 2 * time.Minute

// SetMaxIdle makes the cache remove the entries not used (by Get or Add)
// for longer than d, at each Add and each RemoveIdle, least recently used
// first; OnEvict's function is called for them too. A cache filled by
// what passes (new processes, new addresses) then holds what was used
// lately, whose size levels off once d has passed, instead of growing
// toward its bound for as long as new keys come. Zero, the default, keeps
// entries until they are evicted for room.
func (c *Cache[K, V]) SetMaxIdle(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.maxIdle == 0 && d > 0 {
		// Uses so far were not timed: they count from now.
		now := c.now().UnixNano()
		for el := c.order.Front(); el != nil; el = el.Next() {
			el.Value.(*entry[K, V]).used = now
		}
	}
	c.maxIdle = max(d, 0)
}

// SetClock replaces time.Now as the clock that SetMaxIdle's bound is
// measured with, for the tests of a cache's owner.
func (c *Cache[K, V]) SetClock(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// RemoveIdle removes the entries idle for longer than the cache's
// SetMaxIdle bound, and returns how many it removed.
func (c *Cache[K, V]) RemoveIdle() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removeIdle(c.now().UnixNano())
}

// removeIdle removes the entries last used before now-maxIdle: they are
// at the back of the order, which is the order of use.
func (c *Cache[K, V]) removeIdle(now int64) int {
	if c.maxIdle == 0 {
		return 0
	}
	n := 0
	for el := c.order.Back(); el != nil; el = c.order.Back() {
		e := el.Value.(*entry[K, V])
		if now-e.used <= int64(c.maxIdle) {
			break
		}
		c.removeElement(el)
		c.stats.Expired++
		n++
		if c.onEvict != nil {
			c.onEvict(e.key, e.value)
		}
	}
	return n
}

// stamp is the time of a use: the clock is read only when entries can
// expire.
func (c *Cache[K, V]) stamp() int64 {
	if c.maxIdle == 0 {
		return 0
	}
	return c.now().UnixNano()
}

// OnEvict sets a function called, under the cache's lock, for each entry
// removed to make room. It must not call back into the cache.
func (c *Cache[K, V]) OnEvict(fn func(K, V)) {
	c.mu.Lock()
	c.onEvict = fn
	c.mu.Unlock()
}

// Get returns the value for key and marks it most recently used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		c.stats.Hits++
		e := el.Value.(*entry[K, V])
		e.used = c.stamp()
		return e.value, true
	}
	c.stats.Misses++
	var zero V
	return zero, false
}

// Peek returns the value for key without marking it used or counting a hit.
func (c *Cache[K, V]) Peek(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		return el.Value.(*entry[K, V]).value, true
	}
	var zero V
	return zero, false
}

// Add stores value under key, replacing any earlier value, and evicts the
// least recently used entries until the cache is within its bound. An entry
// costlier than the whole bound is not stored; Add reports whether it was.
func (c *Cache[K, V]) Add(key K, value V) bool {
	cost := int64(1)
	if c.costOf != nil {
		cost = c.costOf(key, value)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.removeElement(el)
	}
	now := c.stamp()
	c.removeIdle(now)
	if cost > c.maxCost {
		return false
	}
	for c.stats.Cost+cost > c.maxCost {
		c.evictOldest()
	}
	c.items[key] = c.order.PushFront(&entry[K, V]{key: key, value: value, cost: cost, used: now})
	c.stats.Cost += cost
	return true
}

// Remove deletes key and reports whether it was present.
func (c *Cache[K, V]) Remove(key K) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if ok {
		c.removeElement(el)
	}
	return ok
}

// RemoveFunc deletes every entry for which drop returns true, and returns
// how many it deleted. drop must not call back into the cache.
func (c *Cache[K, V]) RemoveFunc(drop func(K, V) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for el := c.order.Front(); el != nil; {
		next := el.Next()
		e := el.Value.(*entry[K, V])
		if drop(e.key, e.value) {
			c.removeElement(el)
			n++
		}
		el = next
	}
	return n
}

// Purge deletes every entry. It does not count evictions.
func (c *Cache[K, V]) Purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order.Init()
	clear(c.items)
	c.stats.Cost = 0
}

// Len returns the number of entries held.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// Cost returns the summed cost of the entries held.
func (c *Cache[K, V]) Cost() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats.Cost
}

// Stats returns the cache's counts.
func (c *Cache[K, V]) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Len = len(c.items)
	s.MaxCost = c.maxCost
	return s
}

func (c *Cache[K, V]) evictOldest() {
	el := c.order.Back()
	if el == nil {
		return
	}
	e := el.Value.(*entry[K, V])
	c.removeElement(el)
	c.stats.Evictions++
	if c.onEvict != nil {
		c.onEvict(e.key, e.value)
	}
}

func (c *Cache[K, V]) removeElement(el *list.Element) {
	e := c.order.Remove(el).(*entry[K, V])
	delete(c.items, e.key)
	c.stats.Cost -= e.cost
}
