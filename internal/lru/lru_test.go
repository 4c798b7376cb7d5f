package lru

import (
	"testing"
	"time"
)

func TestCountBound(t *testing.T) {
	c := New[int, string](2, nil)
	c.Add(1, "a")
	c.Add(2, "b")
	if _, ok := c.Get(1); !ok { // 1 becomes most recent
		t.Fatal("1 missing")
	}
	c.Add(3, "c") // evicts 2
	if _, ok := c.Get(2); ok {
		t.Fatal("2 should have been evicted")
	}
	for _, k := range []int{1, 3} {
		if _, ok := c.Get(k); !ok {
			t.Fatalf("%d missing", k)
		}
	}
	s := c.Stats()
	if s.Len != 2 || s.Cost != 2 || s.Evictions != 1 || s.Hits != 3 || s.Misses != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestCostBound(t *testing.T) {
	var evicted []string
	c := New[string, []byte](10, func(_ string, v []byte) int64 { return int64(len(v)) })
	c.OnEvict(func(k string, _ []byte) { evicted = append(evicted, k) })
	c.Add("a", make([]byte, 4))
	c.Add("b", make([]byte, 4))
	c.Add("c", make([]byte, 4)) // 12 > 10: a goes
	if c.Cost() != 8 || len(evicted) != 1 || evicted[0] != "a" {
		t.Fatalf("cost %d evicted %v", c.Cost(), evicted)
	}
	if c.Add("huge", make([]byte, 11)) {
		t.Fatal("an entry over the whole bound was stored")
	}
	c.Add("b", make([]byte, 1)) // replacing adjusts the cost
	if c.Cost() != 5 {
		t.Fatalf("cost after replace = %d, want 5", c.Cost())
	}
	if n := c.RemoveFunc(func(k string, _ []byte) bool { return k == "c" }); n != 1 || c.Len() != 1 {
		t.Fatalf("RemoveFunc removed %d, len %d", n, c.Len())
	}
	c.Purge()
	if c.Len() != 0 || c.Cost() != 0 {
		t.Fatal("purge left entries")
	}
}

// TestMaxIdle checks that entries unused for longer than the idle bound
// go at the next Add or RemoveIdle, least recently used first, whatever
// room is left, and that a Get keeps an entry.
func TestMaxIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New[int, string](100, nil)
	c.SetClock(func() time.Time { return now })
	var gone []int
	c.OnEvict(func(k int, _ string) { gone = append(gone, k) })
	c.SetMaxIdle(time.Minute)
	c.Add(1, "a")
	c.Add(2, "b")
	now = now.Add(40 * time.Second)
	c.Add(3, "c")
	if _, ok := c.Get(1); !ok { // used again: 1 stays
		t.Fatal("1 missing")
	}
	now = now.Add(30 * time.Second) // 2 idle 70 s, 3 idle 30 s, 1 idle 30 s
	if n := c.RemoveIdle(); n != 1 || c.Len() != 2 {
		t.Fatalf("RemoveIdle removed %d, len %d; want 1 and 2", n, c.Len())
	}
	if _, ok := c.Peek(2); ok {
		t.Fatal("2 idle for 70 s is still held")
	}
	now = now.Add(45 * time.Second) // 1 and 3 idle 75 s
	c.Add(4, "d")
	if c.Len() != 1 || c.Cost() != 1 {
		t.Fatalf("after an Add with 1 and 3 idle: len %d cost %d, want 1 and 1", c.Len(), c.Cost())
	}
	if _, ok := c.Peek(4); !ok {
		t.Fatal("4 missing")
	}
	s := c.Stats()
	if s.Expired != 3 || s.Evictions != 0 || len(gone) != 3 || gone[0] != 2 {
		t.Fatalf("stats %+v, removed %v; want 3 expired, 2 first", s, gone)
	}
}

// TestMaxIdleOff checks that without SetMaxIdle entries stay however old.
func TestMaxIdleOff(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New[int, string](100, nil)
	c.SetClock(func() time.Time { return now })
	c.Add(1, "a")
	now = now.Add(24 * time.Hour)
	c.Add(2, "b")
	if n := c.RemoveIdle(); n != 0 || c.Len() != 2 {
		t.Fatalf("RemoveIdle removed %d, len %d", n, c.Len())
	}
}
