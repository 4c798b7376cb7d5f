package lru

import "testing"

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
