// Package lru is the one bounded cache of bpfcol: a least-recently-used map
// bounded by a cost (a count of entries, or bytes), whose size, hits and
// evictions are visible so that every cache can be published as a metric.
package lru

import (
	"container/list"
	"sync"
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
}

type entry[K comparable, V any] struct {
	key   K
	value V
	cost  int64
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
	}
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
		return el.Value.(*entry[K, V]).value, true
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
	if cost > c.maxCost {
		return false
	}
	for c.stats.Cost+cost > c.maxCost {
		c.evictOldest()
	}
	c.items[key] = c.order.PushFront(&entry[K, V]{key: key, value: value, cost: cost})
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
