package perfmap

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestIncrementalRead writes this process's own perf map in steps, as a
// runtime does, and checks that appended and rewritten symbols are found
// and that a partial line waits for its end.
func TestIncrementalRead(t *testing.T) {
	path := fmt.Sprintf("/tmp/perf-%d.map", os.Getpid())
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); os.Remove(path) })
	c := New(4, 0)
	pid := os.Getpid()
	if _, ok := c.Lookup(pid, 0x1000); ok {
		t.Fatal("named an address of an empty map")
	}
	fmt.Fprintf(f, "1000 100 LazyCompile:*fib /app/fib.js:1\n2000 0x20 Builtin:Add\n30")
	if name, ok := c.Lookup(pid, 0x1010); !ok || name != "LazyCompile:*fib /app/fib.js:1" {
		t.Fatalf("0x1010 = %q, %v", name, ok)
	}
	if _, ok := c.Lookup(pid, 0x1100); ok {
		t.Fatal("named an address past the symbol's size")
	}
	if _, ok := c.Lookup(pid, 0x3000); ok {
		t.Fatal("named an address from a partial line")
	}
	// The partial line ends; a later line redefines 0x1000 (code moved).
	fmt.Fprintf(f, "00 10 JS:late\n1000 80 JS:recompiled\n")
	if name, ok := c.Lookup(pid, 0x3004); !ok || name != "JS:late" {
		t.Fatalf("0x3004 = %q, %v", name, ok)
	}
	if name, _ := c.Lookup(pid, 0x1010); name != "JS:recompiled" {
		t.Fatalf("0x1010 after rewrite = %q", name)
	}
	if name, _ := c.Lookup(pid, 0x2010); name != "Builtin:Add" {
		t.Fatalf("0x2010 = %q", name)
	}
	if st := c.Stats(); st.Processes != 1 || st.Symbols != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRefreshInterval checks that a file is not re-read before the
// interval passed.
func TestRefreshInterval(t *testing.T) {
	path := fmt.Sprintf("/tmp/perf-%d.map", os.Getpid())
	if err := os.WriteFile(path, []byte("1000 10 A\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	c := New(4, time.Hour)
	if _, ok := c.Lookup(os.Getpid(), 0x1000); !ok {
		t.Fatal("A not found")
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "2000 10 B\n")
	f.Close()
	if _, ok := c.Lookup(os.Getpid(), 0x2000); ok {
		t.Fatal("file re-read within the refresh interval")
	}
}

// TestNoSymlink refuses a perf map that is a symlink.
func TestNoSymlink(t *testing.T) {
	path := fmt.Sprintf("/tmp/perf-%d.map", os.Getpid())
	target := t.TempDir() + "/secret"
	os.WriteFile(target, []byte("1000 10 SECRET\n"), 0o600)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	if _, ok := New(4, 0).Lookup(os.Getpid(), 0x1000); ok {
		t.Fatal("followed a symlinked perf map")
	}
}
