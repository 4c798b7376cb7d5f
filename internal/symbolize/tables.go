package symbolize

import (
	"sync"
	"sync/atomic"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/symbolize/dwarfsym"
)

// tableKind says which parsed table of a binary an entry of the table
// cache holds.
type tableKind uint8

const (
	// kindSymtab: the sorted index of .symtab (or .dynsym) functions.
	kindSymtab tableKind = iota
	// kindDWARF: the first kind of the DWARF tables, dwarfsym.Kind
	// numbering those after it (dwarfKind).
	kindDWARF
)

// dwarfKind is the kind of the DWARF table of kind k.
func dwarfKind(k dwarfsym.Kind) tableKind { return kindDWARF + tableKind(k) }

// binaryTables is one binary's entries of Tables, as dwarfsym asks for
// them.
type binaryTables struct {
	t  *Tables
	id uint64
}

func (b binaryTables) Get(k dwarfsym.Kind, unit int32, drop []byte, parse func() (any, int64)) any {
	return b.t.get(tableKey{binary: b.id, kind: dwarfKind(k), unit: unit}, drop, parse)
}

func (b binaryTables) Add(k dwarfsym.Kind, v any, cost int64) {
	b.t.add(tableKey{binary: b.id, kind: dwarfKind(k)}, v, cost)
}

func (b binaryTables) DropPrefix() { b.t.dropPrefix(b.id) }

// tableKey names one parsed table: the binary (by a number unique in the
// process, since a Binary's file can be replaced), what table, and for a
// compile unit its index.
type tableKey struct {
	binary uint64
	kind   tableKind
	unit   int32
}

// parsedTable is a value of the table cache with the heap it holds.
type parsedTable struct {
	value any
	cost  int64
}

// Tables is a byte-bounded cache of parsed symbol tables, shared by the
// Binaries opened with it: the receiver gives one to its BinaryCache and
// its Symbolizer, the uprobe receiver one to the binaries it places probes
// in. Tables are parsed again from the mapped file
// when asked for after eviction, so the bound holds however many binaries
// are open. A table larger than half the bound is still kept, counted as
// half: parsing it again for every lookup would cost more than the memory,
// and the other half leaves room for the compile units parsed through it
// (a binary's DWARF index and its units must fit together, or each would
// evict the other). Such a table is the one way the heap held exceeds the
// bound; Stats.Cost then reads low by what it holds beyond half.
type Tables struct {
	mu      sync.Mutex
	lru     *lru.Cache[tableKey, *parsedTable]
	parsing map[tableKey]chan struct{} // closed once the key's parse ended
	max     atomic.Int64
	// spill is where the Binaries whose tables are held here decompress
	// their compressed sections: the section spill of the Symbolizer
	// given these Tables, nil (the heap) without one.
	spill atomic.Pointer[sectionSpill]
}

// NewTables returns a cache of parsed tables bounded by maxBytes of heap
// (DefaultMaxTableBytes when 0 or less).
func NewTables(maxBytes int64) *Tables {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxTableBytes
	}
	c := &Tables{parsing: map[tableKey]chan struct{}{}}
	c.setMax(maxBytes)
	return c
}

// setMax replaces the bound, dropping what was held.
func (c *Tables) setMax(maxBytes int64) {
	maxBytes = max(maxBytes, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.max.Store(maxBytes)
	c.lru = lru.New(maxBytes, func(_ tableKey, t *parsedTable) int64 { return min(t.cost, max(maxBytes/2, 1)) })
	c.lru.SetMaxIdle(tableMaxIdle)
}

// tableMaxIdle is how long a parsed table stays unused before it is
// dropped. Compile units are parsed as addresses fall into them, and
// processes that start and exit reach new ones (start-up code) for a long
// time: held until evicted for room, they grew the heap toward the whole
// bound over ten minutes and more.
const tableMaxIdle = lru.ChurnIdle

// get returns the table under key, calling parse on a miss. A nil value
// from parse (nothing usable) is cached like any other, at its cost. The
// pages of drop, the mapped file parse read, leave the RSS after a parse.
//
// Each key is parsed by one caller at a time, without holding the cache:
// lookups of other tables go on meanwhile, and those of the same key wait
// for its parse.
func (c *Tables) get(key tableKey, drop []byte, parse func() (any, int64)) any {
	c.mu.Lock()
	for {
		if t, ok := c.lru.Get(key); ok {
			c.mu.Unlock()
			return t.value
		}
		wait, busy := c.parsing[key]
		if !busy {
			break
		}
		c.mu.Unlock()
		<-wait
		c.mu.Lock()
	}
	done := make(chan struct{})
	c.parsing[key] = done
	c.mu.Unlock()

	var v any
	cost := int64(minTableCost)
	defer func() {
		// Also when parse panics: waiters then parse themselves.
		c.mu.Lock()
		delete(c.parsing, key)
		close(done)
		c.mu.Unlock()
	}()
	v, cost = parse()
	if drop != nil {
		// Parsing read much of the file: what lookups read again is a
		// few pages.
		elfbin.DropPages(drop)
	}
	c.mu.Lock()
	c.lru.Add(key, &parsedTable{value: v, cost: max(cost, minTableCost)})
	c.mu.Unlock()
	return v
}

// add stores a table parsed elsewhere, unless one is held under key.
func (c *Tables) add(key tableKey, v any, cost int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.lru.Peek(key); !ok {
		c.lru.Add(key, &parsedTable{value: v, cost: max(cost, minTableCost)})
	}
}

// minTableCost is the least an entry costs: its key, record and list
// element.
const minTableCost = 128

// dropPrefix drops the tables of binary id read by prefix, once its whole
// index answers instead.
func (c *Tables) dropPrefix(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.RemoveFunc(func(k tableKey, _ *parsedTable) bool {
		return k.binary == id && (k.kind == dwarfKind(dwarfsym.KindPrefixIndex) || k.kind == dwarfKind(dwarfsym.KindPrefixUnit))
	})
}

// dropBinary removes every table of the binary numbered id.
func (c *Tables) dropBinary(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.RemoveFunc(func(k tableKey, _ *parsedTable) bool { return k.binary == id })
}

// Stats returns the size, hits and evictions of the cache; its cost is in
// bytes of heap.
func (c *Tables) Stats() lru.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Stats()
}

// binaryIDs numbers Binaries for table keys.
var binaryIDs atomic.Uint64
