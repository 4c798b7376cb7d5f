package kernelsym

import "runtime"

// resultKey is one request: the same address names a different symbol as a
// return address (%pB looks up addr-1).
type resultKey struct {
	addr     uint64
	isReturn bool
}

// resultCache holds answers for core kernel text only, which never moves;
// module, BPF program and trampoline memory is reused after an unload, so
// those addresses are asked again every time. It is cleared when full: profiles revisit the
// same few thousand addresses, so a clear is rare and cheap to recover from.
type resultCache struct {
	entries map[resultKey]Symbol
	max     int
	stats   *Stats
}

func newResultCache(max int, stats *Stats) *resultCache {
	return &resultCache{entries: make(map[resultKey]Symbol), max: max, stats: stats}
}

func (c *resultCache) get(k resultKey) (Symbol, bool) {
	s, ok := c.entries[k]
	if ok {
		c.stats.CacheHits++
	} else {
		c.stats.CacheMisses++
	}
	return s, ok
}

func (c *resultCache) put(k resultKey, s Symbol) {
	if !cacheable(k, s) || c.max <= 0 {
		return
	}
	if len(c.entries) >= c.max {
		clear(c.entries)
		c.stats.CacheClears++
	}
	c.entries[k] = s
}

func (c *resultCache) len() int { return len(c.entries) }

// Core kernel text on x86-64 is mapped in the 1 GiB below the module area
// (Documentation/arch/x86/x86_64/mm.rst), where BPF JIT images, trampolines
// and modules live; elsewhere nothing is assumed and nothing is cached.
const (
	amd64KernelTextStart = 0xffffffff80000000
	amd64ModulesStart    = 0xffffffffc0000000
)

func cacheable(k resultKey, s Symbol) bool {
	if !s.OK || s.Truncated || s.Module != "" || s.IsBPFProg || runtime.GOARCH != "amd64" {
		return false
	}
	looked := k.addr
	if k.isReturn {
		looked--
	}
	return looked >= amd64KernelTextStart && looked < amd64ModulesStart
}
