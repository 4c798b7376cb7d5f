package dirwatch

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/safefs"
)

// next returns the next change, failing the test when none comes: a
// missing event would otherwise hang it.
func next(t *testing.T, w *Watcher) Change {
	t.Helper()
	type result struct {
		c   Change
		err error
	}
	ch := make(chan result, 1)
	go func() { c, err := w.Next(); ch <- result{c, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.c
	case <-time.After(30 * time.Second):
		t.Fatal("no change told of")
	}
	return Change{}
}

// TestChanges writes, rewrites, links, moves in and symlinks files in a
// watched directory: each file is one change however often it was written
// before the consumer asked, a hard link is told of as created, a file
// moved in as written, and a symlink is told of but cannot be opened
// through the watched directory.
func TestChanges(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	w, skipped, err := New([]string{dir, filepath.Join(dir, "missing")}, Options{MaxDirs: 4, MaxPending: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if len(skipped) != 1 || len(w.Dirs()) != 1 {
		t.Fatalf("watching %v, skipped %v: want the missing directory skipped", w.Dirs(), skipped)
	}
	a := filepath.Join(dir, "a")
	// Written five times before the reader runs: one change.
	for i := range 5 {
		if err := os.WriteFile(a, []byte(strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a, filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(other, "moved")
	if err := os.WriteFile(moved, []byte("m"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(moved, filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name    string
		written bool
	}{{"a", true}, {"hard", false}, {"moved", true}, {"link", false}}
	for _, wc := range want {
		c := next(t, w)
		if c.Lost || c.Name != wc.name || c.Written != wc.written {
			t.Fatalf("change %+v, want %s written=%v", c, wc.name, wc.written)
		}
		if c.Dir.Name() != dir {
			t.Fatalf("change in %s, want %s", c.Dir.Name(), dir)
		}
	}
	// The kernel merges repeated identical events itself; the creation
	// and the close are merged here.
	if st := w.Stats(); st.Coalesced < 1 || st.Overflows != 0 || st.Dropped != 0 {
		t.Errorf("stats %+v: want the events of a coalesced, nothing lost", st)
	}
	// The symlink is refused by the directory handed with the change.
	c := Change{Dir: w.dirs[func() int32 {
		for wd := range w.dirs {
			return wd
		}
		return 0
	}()], Name: "link"}
	if f, err := c.Dir.Open(c.Name); err == nil || !errors.Is(err, safefs.ErrSymlink) {
		if f != nil {
			f.Close()
		}
		t.Errorf("opening a symlink in a watched directory: %v, want %v", err, safefs.ErrSymlink)
	}
	// A later write of a is a new change.
	if err := os.WriteFile(a, []byte("again"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c := next(t, w); c.Name != "a" || !c.Written {
		t.Fatalf("change %+v, want a written again", c)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Next(); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close: %v, want %v", err, ErrClosed)
	}
}

// TestLossIsTold fills the kernel's event queue before the reader runs
// and more files than the watcher holds: the overflow and the drops are
// counted, and Lost changes tell the consumer.
func TestLossIsTold(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Fatal(err)
	}
	queued, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || queued <= 0 || queued > 1<<17 {
		t.Fatalf("max_queued_events %q", b)
	}
	dir := t.TempDir()
	const maxPending = 8
	w, _, err := New([]string{dir}, Options{MaxDirs: 1, MaxPending: maxPending})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Each file is two events (created, closed after writing).
	files := queued/2 + 16
	for i := range files {
		f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// Read until the Lost change queued for the overflow, which the
	// reader counts before queueing it, at the end of the kernel's queue.
	var names, lost int
	for {
		c := next(t, w)
		if !c.Lost {
			names++
			continue
		}
		lost++
		if w.Stats().Overflows > 0 {
			break
		}
	}
	st := w.Stats()
	t.Logf("%d files, queue of %d events: %d changes, stats %+v", files, queued, names, st)
	if st.Overflows != 1 {
		t.Errorf("%d overflows counted, want 1", st.Overflows)
	}
	if st.Dropped == 0 {
		t.Errorf("no drop counted with %d files and room for %d", files, maxPending)
	}
	if uint64(names)+st.Dropped+st.Coalesced > uint64(2*files) {
		t.Errorf("%d changes, %d dropped and %d coalesced of %d events", names, st.Dropped, st.Coalesced, 2*files)
	}
}
