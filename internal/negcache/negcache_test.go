package negcache

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time { return f.t }

func file(ino uint64, size int64, mtime int64) process.FileID {
	return process.FileID{FileKey: process.FileKey{Dev: 1, Ino: ino}, Size: size, ModTime: time.Unix(mtime, 0)}
}

func TestContainsChecksSizeAndMtime(t *testing.T) {
	c := NewFiles(time.Minute, 10)
	c.Add(file(1, 100, 5))
	if !c.Contains(file(1, 100, 5)) {
		t.Fatal("added file not found")
	}
	if c.Contains(file(1, 101, 5)) {
		t.Fatal("file with another size served the cached verdict")
	}
	// The mismatch dropped the entry: the original identity is gone too.
	if c.Contains(file(1, 100, 5)) || c.Len() != 0 {
		t.Fatalf("mismatching lookup left the entry (len %d)", c.Len())
	}
	c.Add(file(1, 100, 5))
	if c.Contains(file(1, 100, 6)) {
		t.Fatal("file with another mtime served the cached verdict")
	}
}

func TestExpiredEntryDroppedOnLookup(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := NewFiles(time.Minute, 10, WithClock(clk.now))
	c.Add(file(1, 1, 1))
	clk.t = clk.t.Add(time.Minute)
	if c.Contains(file(1, 1, 1)) {
		t.Fatal("expired entry served")
	}
	if c.Len() != 0 {
		t.Fatalf("expired entry kept after lookup: len %d", c.Len())
	}
}

func TestOverwriteInPlaceKeepsOneEntry(t *testing.T) {
	c := NewFiles(time.Minute, 10)
	for i := range 50 {
		c.Add(file(7, int64(i), int64(i)))
	}
	if c.Len() != 1 {
		t.Fatalf("len = %d, want 1", c.Len())
	}
	if !c.Contains(file(7, 49, 49)) {
		t.Fatal("latest identity not cached")
	}
}

func TestSweepAtMostOncePerTTL(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := NewFiles(time.Minute, 100, WithClock(clk.now))
	c.Add(file(1, 1, 1)) // sweeps (first insert) and schedules the next sweep
	clk.t = clk.t.Add(30 * time.Second)
	c.Add(file(2, 1, 1))
	clk.t = clk.t.Add(40 * time.Second) // entry 1 expired, entry 2 not
	c.Add(file(3, 1, 1))                // 70s after the first sweep: sweeps
	if c.Len() != 2 {
		t.Fatalf("len = %d after sweep, want 2", c.Len())
	}
	clk.t = clk.t.Add(25 * time.Second) // entry 2 expired; next sweep not due
	c.Add(file(4, 1, 1))
	if c.Len() != 3 {
		t.Fatalf("len = %d, want 3: a sweep ran before its TTL", c.Len())
	}
	clk.t = clk.t.Add(40 * time.Second)
	c.Add(file(5, 1, 1))
	// Entries 2, 3 expired (3 was added 65s ago); 4 is 40s old.
	if c.Len() != 2 || !c.Contains(file(4, 1, 1)) || !c.Contains(file(5, 1, 1)) {
		t.Fatalf("len = %d after second sweep, want entries 4 and 5", c.Len())
	}
}

func TestBounded(t *testing.T) {
	c := NewFiles(time.Hour, 8)
	for i := range 100 {
		c.Add(file(uint64(i), 1, 1))
	}
	if c.Len() != 8 {
		t.Fatalf("len = %d, want 8", c.Len())
	}
	if c.Contains(file(0, 1, 1)) || !c.Contains(file(99, 1, 1)) {
		t.Fatal("eviction did not drop the oldest entry")
	}
}

func TestConcurrent(t *testing.T) {
	c := NewFiles(time.Millisecond, 64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				f := file(uint64(i%100), int64(g), 1)
				c.Add(f)
				c.Contains(f)
				if i%7 == 0 {
					c.Remove(f.FileKey)
				}
			}
		})
	}
	wg.Wait()
	if c.Len() > 64 {
		t.Fatalf("len = %d beyond the bound", c.Len())
	}
}

func TestFileOfReplacedFile(t *testing.T) {
	// FileIDOf reads stat fields on Linux only.
	testenv.RequirePlatform(t, runtime.GOOS == "linux", "Linux")
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte("stripped"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := process.FileIDOf(fi)
	if !ok || f.Ino == 0 || f.Size != 8 {
		t.Fatalf("FileIDOf = %+v, %v", f, ok)
	}
	c := NewFiles(time.Hour, 4)
	c.Add(f)
	// Overwrite in place: same inode, new size and mtime.
	if err := os.WriteFile(p, []byte("now with symbols"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(p)
	g, _ := process.FileIDOf(fi)
	if g.FileKey != f.FileKey {
		t.Fatalf("in-place write changed the inode: %v -> %v", f.FileKey, g.FileKey)
	}
	if c.Contains(g) {
		t.Fatal("replaced binary served the stale verdict")
	}
}

func TestKeysExpireAndStayBounded(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := NewKeys[string](time.Minute, 4, WithClock(clk.now))
	c.Add("dead")
	if !c.Contains("dead") || c.Contains("beef") {
		t.Fatal("a plain key is not remembered on its own")
	}
	clk.t = clk.t.Add(time.Minute)
	if c.Contains("dead") {
		t.Fatal("expired key served")
	}
	for i := range 20 {
		c.Add(string(rune('a' + i)))
	}
	st := c.Stats()
	if c.Len() != 4 || st.Len != 4 || st.Evictions != 16 {
		t.Fatalf("len %d, stats %+v: want 4 entries after 16 evictions", c.Len(), st)
	}
	if c.Contains("a") || !c.Contains("t") {
		t.Fatal("eviction did not drop the oldest key")
	}
}
