package debugcache

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func put(t *testing.T, c *Cache, id string, size int) {
	t.Helper()
	p, err := c.Path(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Added(id); err != nil {
		t.Fatal(err)
	}
}

func TestEvictionAndRestart(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir, 3000)
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, "aaaa01", 1000)
	put(t, c, "bbbb02", 1000)
	if _, ok := c.Lookup("aaaa01"); !ok { // aaaa01 becomes most recent
		t.Fatal("aaaa01 missing")
	}
	put(t, c, "cccc03", 1500) // over budget: bbbb02 is the least recently used
	if _, ok := c.Lookup("bbbb02"); ok {
		t.Error("least recently used file not evicted")
	}
	p, _ := c.Path("bbbb02")
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("evicted file still on disk: %v", err)
	}
	if c.Size() != 2500 || c.Len() != 2 {
		t.Errorf("size %d len %d, want 2500 and 2", c.Size(), c.Len())
	}
	// Restart: the index is rebuilt, the mtime order kept.
	time.Sleep(10 * time.Millisecond)
	c.Lookup("aaaa01")
	c2, err := Open(dir, 3000)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Len() != 2 || c2.Size() != 2500 {
		t.Fatalf("after restart: len %d size %d", c2.Len(), c2.Size())
	}
	put(t, c2, "dddd04", 1000) // evicts cccc03, used less recently than aaaa01
	if _, ok := c2.Lookup("cccc03"); ok {
		t.Error("LRU order lost across restart")
	}
	if _, ok := c2.Lookup("aaaa01"); !ok {
		t.Error("recently used file evicted")
	}
	for _, d := range []string{dir, filepath.Join(dir, ".build-id")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s mode %v, want 0700", d, fi.Mode().Perm())
		}
	}
	if _, err := c.Path("../../etc"); err == nil {
		t.Error("Path accepted a non-hex build-id")
	}
}
