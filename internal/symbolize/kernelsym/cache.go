package kernelsym

import (
	"github.com/bpfcol/bpfcol/internal/lru"
)

// resultKey is one request: the same address names a different symbol as a
// return address (%pB looks up addr-1).
type resultKey struct {
	addr     uint64
	isReturn bool
}

// resultCache holds answers for core kernel text only, which never moves;
// module, BPF program and trampoline memory is reused after an unload, so
// those addresses are asked again every time. Profiles revisit the same few
// thousand addresses, so the least recently used answers are the ones to
// drop when it is full.
type resultCache struct {
	entries *lru.Cache[resultKey, Symbol]
	off     bool // a disabled cache misses every get and keeps nothing
	// text is the core kernel text's [start, end): answers outside it
	// are not kept. Empty where it is not known.
	text [2]uint64
}

// resultMaxIdle is how long an answer stays cached unused. The kernel
// paths of processes starting and exiting (exec, page faults, exit) reach
// new addresses for a long time; without it the cache grew toward its
// 65536 entries (some 15 MB) for as long as that went on.
const resultMaxIdle = lru.ChurnIdle

func newResultCache(max int, text [2]uint64) *resultCache {
	c := &resultCache{entries: lru.New[resultKey, Symbol](int64(max), nil), off: max <= 0, text: text}
	c.entries.SetMaxIdle(resultMaxIdle)
	return c
}

func (c *resultCache) get(k resultKey) (Symbol, bool) { return c.entries.Get(k) }

func (c *resultCache) put(k resultKey, s Symbol) {
	if c.off || !c.cacheable(k, s) {
		return
	}
	c.entries.Add(k, s)
}

// Core kernel text on x86-64 is mapped in the 1 GiB below the module area
// (Documentation/arch/x86/x86_64/mm.rst), where BPF JIT images, trampolines
// and modules live. Elsewhere (arm64, whose kernel image KASLR places
// anywhere in the vmalloc area) it is read from kallsyms (coreText).
const (
	amd64KernelTextStart = 0xffffffff80000000
	amd64ModulesStart    = 0xffffffffc0000000
)

func (c *resultCache) cacheable(k resultKey, s Symbol) bool {
	if !s.OK || s.Truncated || s.Module != "" || s.IsBPFProg {
		return false
	}
	looked := k.addr
	if k.isReturn {
		looked--
	}
	return looked >= c.text[0] && looked < c.text[1]
}

// coreText returns the bounds of the core kernel's text on goarch: a fixed
// window on amd64, else _stext to _etext as the formatter looks them up.
// Empty when they are not known (kptr_restrict hides them, the formatter
// is not loaded): nothing is cached then.
func coreText(goarch string, f formatter) [2]uint64 {
	if goarch == "amd64" {
		return [2]uint64{amd64KernelTextStart, amd64ModulesStart}
	}
	if f == nil {
		return [2]uint64{}
	}
	lo, hi, err := f.TextBounds()
	if err != nil || lo == 0 || hi <= lo {
		return [2]uint64{}
	}
	return [2]uint64{lo, hi}
}
