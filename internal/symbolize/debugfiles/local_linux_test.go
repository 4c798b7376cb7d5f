package debugfiles

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/bpfcol/bpfcol/internal/safefs"
	"github.com/bpfcol/bpfcol/internal/symbolize/debugcache"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
)

// TestLocalDebugFilesStayInTheirDirectory: in /usr/lib/debug and the
// debug_directories a link is followed only while it stays inside; in the
// cache no link is followed and a planted one is removed and counted.
func TestLocalDebugFilesStayInTheirDirectory(t *testing.T) {
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary.debug")
	if err := os.WriteFile(canary, []byte("canary"), 0o600); err != nil {
		t.Fatal(err)
	}
	system, extra, cache := t.TempDir(), t.TempDir(), t.TempDir()
	mk := func(path, content string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, path string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(path), 0o700)
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	// Fedora's layout: .build-id links to the file inside the same tree.
	mk(filepath.Join(system, "usr", "bin", "tool.debug"), "inside")
	link("../../usr/bin/tool.debug", filepath.Join(system, ".build-id", "ab", "cdef.debug"))
	link(canary, filepath.Join(system, ".build-id", "ab", "abs0.debug"))
	link("../../../../../../../../../.."+canary, filepath.Join(extra, ".build-id", "ab", "up00.debug"))
	link(canary, filepath.Join(cache, ".build-id", "ab", "cach.debug"))

	c, err := debugcache.Open(cache, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{SystemDebugDir: system, DebugDirectories: []string{extra}}, debuginfod.New(debuginfod.Config{}), c)
	defer s.Close()
	f, err := s.openLocal(filepath.Join(system, ".build-id", "ab", "cdef.debug"))
	if err != nil {
		t.Fatalf("link inside /usr/lib/debug refused: %v", err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "inside" {
		t.Errorf("read %q through the inner link", b)
	}
	for _, p := range []string{
		filepath.Join(system, ".build-id", "ab", "abs0.debug"),
		filepath.Join(extra, ".build-id", "ab", "up00.debug"),
	} {
		if f, err := s.openLocal(p); !errors.Is(err, safefs.ErrSymlink) {
			if f != nil {
				f.Close()
			}
			t.Errorf("%s: %v, want the escaping link refused", p, err)
		}
	}
	// The cache's planted link was removed when the cache was opened.
	if _, err := os.Lstat(filepath.Join(cache, ".build-id", "ab", "cach.debug")); !os.IsNotExist(err) {
		t.Errorf("planted link still in the cache: %v", err)
	}
	if n := s.CacheCorrupt(); n != 1 {
		t.Errorf("%d corrupt cache entries, want the removed link counted", n)
	}
}
