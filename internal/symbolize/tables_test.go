package symbolize

import (
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/symbolize/dwarfsym"
)

// TestTableCacheDropsIdleTables parses two tables, uses one of them for
// longer than tableMaxIdle, and checks that the next parse drops the other:
// compile units that processes reached once (start-up code of processes
// long exited) do not stay until the byte bound is reached.
func TestTableCacheDropsIdleTables(t *testing.T) {
	c := NewTables(1 << 20)
	now := time.Now()
	c.lru.SetClock(func() time.Time { return now })
	parses := 0
	parse := func() (any, int64) { parses++; return parses, 1000 }
	used, idle := tableKey{binary: 1, kind: dwarfKind(dwarfsym.KindUnit), unit: 1}, tableKey{binary: 1, kind: dwarfKind(dwarfsym.KindUnit), unit: 2}
	c.get(used, nil, parse)
	c.get(idle, nil, parse)
	for range 3 {
		now = now.Add(tableMaxIdle / 2)
		c.get(used, nil, parse)
	}
	c.get(tableKey{binary: 2, kind: kindSymtab}, nil, parse)
	if _, ok := c.lru.Peek(idle); ok {
		t.Errorf("a unit unused for %s is still held", 3*tableMaxIdle/2)
	}
	if _, ok := c.lru.Peek(used); !ok {
		t.Error("the unit in use was dropped")
	}
	if s := c.Stats(); s.Len != 2 || s.Expired != 1 || s.Evictions != 0 || parses != 3 {
		t.Errorf("stats %+v after %d parses: want 2 tables, 1 expired, 3 parses", s, parses)
	}
}
