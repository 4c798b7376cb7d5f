//go:build linux

package symbolize

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
)

// countingOpener opens path and counts the calls.
type countingOpener struct {
	path  string
	opens atomic.Int64
}

func (o *countingOpener) open() (*os.File, error) {
	o.opens.Add(1)
	return os.Open(o.path)
}

func keyOf(t *testing.T, path string) process.FileKey {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	k, ok := fileKeyOf(fi)
	if !ok {
		t.Fatal("FileKeyOf failed")
	}
	return k
}

func TestBinaryCacheOpensOnce(t *testing.T) {
	ws := builtWorkloads(t)
	path := ws["c-pie"].path
	key := keyOf(t, path)
	c := NewBinaryCache(4, 0, NewTables(0))
	defer c.Close()
	o := &countingOpener{path: path}

	var wg sync.WaitGroup
	got := make([]*Binary, 16)
	for i := range got {
		wg.Go(func() {
			b, err := c.Get(key, o.open)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = b
		})
	}
	wg.Wait()
	if n := o.opens.Load(); n != 1 {
		t.Errorf("open called %d times for one key, want 1", n)
	}
	for _, b := range got {
		if b != got[0] {
			t.Fatal("concurrent Gets returned different Binaries")
		}
		b.Release()
	}
	if c.Len() != 1 {
		t.Errorf("Len() = %d, want 1", c.Len())
	}
}

// TestBinaryCacheEvictionWaitsForReaders checks that eviction never closes a
// file a reader still holds, and closes it on that reader's Release.
func TestBinaryCacheEvictionWaitsForReaders(t *testing.T) {
	ws := builtWorkloads(t)
	c := NewBinaryCache(1, 0, NewTables(0))
	defer c.Close()
	first := &countingOpener{path: ws["c-pie"].path}
	second := &countingOpener{path: ws["c-nopie"].path}

	held, err := c.Get(keyOf(t, first.path), first.open)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Get(keyOf(t, second.path), second.open)
	if err != nil {
		t.Fatal(err)
	}
	other.Release()
	if c.Len() != 1 {
		t.Fatalf("Len() = %d after exceeding the bound of 1", c.Len())
	}
	// Evicted but held: the file must still be readable.
	entry := held.f.ELF.Entry
	if _, err := held.ReadCode(entry, 16); err != nil {
		t.Fatalf("ReadCode on an evicted but held Binary: %v", err)
	}
	held.Release()
	if _, err := held.ReadCode(entry, 16); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("ReadCode after the last Release = %v, want os.ErrClosed", err)
	}
	// A Get after eviction opens the file again.
	again, err := c.Get(keyOf(t, first.path), first.open)
	if err != nil {
		t.Fatal(err)
	}
	again.Release()
	if n := first.opens.Load(); n != 2 {
		t.Errorf("open called %d times, want 2 (once before and once after eviction)", n)
	}
}

func TestBinaryCacheErrorsAndClose(t *testing.T) {
	ws := builtWorkloads(t)
	c := NewBinaryCache(2, 0, NewTables(0))
	notELF := &countingOpener{path: "testdata/cworkload/main.c"}
	if _, err := c.Get(process.FileKey{Dev: 1, Ino: 1}, notELF.open); err == nil {
		t.Fatal("Get of a non-ELF file succeeded")
	}
	if _, err := c.Get(process.FileKey{Dev: 1, Ino: 1}, notELF.open); err == nil {
		t.Fatal("second Get of a non-ELF file succeeded")
	}
	if n := notELF.opens.Load(); n != 2 {
		t.Errorf("failed opens are not cached, want 2 opens, got %d", n)
	}
	if c.Len() != 0 {
		t.Errorf("Len() = %d after failures", c.Len())
	}
	o := &countingOpener{path: ws["go"].path}
	b, err := c.Get(keyOf(t, o.path), o.open)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Closing the cache leaves a held Binary usable until its Release.
	if frames, ok := b.Symbolize(b.f.ELF.Entry); !ok || len(frames) == 0 {
		t.Error("Symbolize on a held Binary after cache Close failed")
	}
	b.Release()
	if _, err := c.Get(keyOf(t, o.path), o.open); !errors.Is(err, ErrCacheClosed) {
		t.Errorf("Get after Close = %v, want ErrCacheClosed", err)
	}
}

// fileKeyOf returns the device and inode of fi, which comes from a stat call.
func fileKeyOf(fi os.FileInfo) (process.FileKey, bool) {
	id, ok := process.FileIDOf(fi)
	return id.FileKey, ok
}

// TestBinaryCacheDropsIdleBinaries opens two binaries, lets binaryMaxIdle
// pass, and opens a third: the idle ones and their files' entries are
// gone (each copy of a deployed binary is a new file, so entries of files
// whose processes exited would otherwise pile up to the bounds), and the
// next Get of one opens it again. A Binary in use stays.
func TestBinaryCacheDropsIdleBinaries(t *testing.T) {
	paths := []string{"/usr/bin/true", "/usr/bin/env", "/usr/bin/cat"}
	openers := make([]*countingOpener, len(paths))
	keys := make([]process.FileKey, len(paths))
	for i, p := range paths {
		openers[i], keys[i] = &countingOpener{path: p}, keyOf(t, p)
	}
	c := NewBinaryCache(8, 0, NewTables(0))
	defer c.Close()
	now := time.Now()
	clock := func() time.Time { return now }
	c.held.SetClock(clock)
	c.files.SetClock(clock)
	get := func(i int) *Binary {
		t.Helper()
		b, err := c.Get(keys[i], openers[i].open)
		if err != nil {
			t.Fatalf("opening %s: %v", paths[i], err)
		}
		return b
	}
	get(0).Release()
	get(1).Release()
	now = now.Add(binaryMaxIdle / 2)
	get(1).Release() // in use: stays
	now = now.Add(binaryMaxIdle/2 + time.Second)
	get(2).Release()
	if s, f := c.Stats(), c.FileStats(); s.Len != 2 || s.Expired != 1 || f.Len != 2 || f.Expired != 1 {
		t.Fatalf("binaries %+v, files %+v: want the idle one of three expired from both", s, f)
	}
	get(1).Release()
	get(0).Release()
	if n0, n1 := openers[0].opens.Load(), openers[1].opens.Load(); n0 != 2 || n1 != 1 {
		t.Errorf("%s opened %d times, %s %d times: want the expired one opened again, the one in use not", paths[0], n0, paths[1], n1)
	}
}
