package pprofexporter

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock returns the same instant every time, to check that names stay
// unique and ordered when exports share a clock tick.
func fakeClock() time.Time { return time.Unix(1_700_000_000, 0) }

func TestRotationByCount(t *testing.T) {
	dir := t.TempDir()
	// Left by an earlier run: rotated at open. Unrelated files stay.
	stale := filepath.Join(dir, exportPrefix+"19990101T000000.000000000Z"+exportSuffix)
	unrelated := filepath.Join(dir, "notes.txt")
	for _, f := range []string{stale, unrelated} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const keep = 3
	s := newFileStore(dir, keep)
	s.now = fakeClock
	if err := s.open(); err != nil {
		t.Fatal(err)
	}

	var written []string
	for i := range 5 {
		path, err := s.write([]byte(fmt.Sprintf("export %d", i)))
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		written = append(written, path)
	}
	if got := exportFiles(t, dir); !slices.Equal(got, written[len(written)-keep:]) {
		t.Errorf("kept %v, want the newest %d of %v", got, keep, written)
	}
	for i, path := range written[len(written)-keep:] {
		data, err := os.ReadFile(path)
		want := fmt.Sprintf("export %d", len(written)-keep+i)
		if err != nil || string(data) != want {
			t.Errorf("%s holds %q (%v), want %q", path, data, err, want)
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, latestName)); err != nil || string(data) != "export 4" {
		t.Errorf("latest.pb.gz holds %q (%v), want the last export", data, err)
	}
	if _, err := os.Stat(unrelated); err != nil {
		t.Errorf("rotation removed a file it does not own: %v", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a file from an earlier run survived rotation: %v", err)
	}
}

// gzipPayload returns a gzip stream of n bytes of b, so a reader can tell a
// complete file (valid stream, right length) from a partial one.
func gzipPayload(t *testing.T, b byte, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(bytes.Repeat([]byte{b}, n)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestLatestReplacedAtomically reads latest.pb.gz while it is rewritten with
// payloads of different sizes: every read must be one whole payload.
func TestLatestReplacedAtomically(t *testing.T) {
	dir := t.TempDir()
	s := newFileStore(dir, 2)
	if err := s.open(); err != nil {
		t.Fatal(err)
	}
	payloads := map[byte]int{'a': 1 << 20, 'b': 3 << 10, 'c': 512 << 10}
	encoded := map[byte][]byte{}
	for b, n := range payloads {
		encoded[b] = gzipPayload(t, b, n)
	}
	if _, err := s.write(encoded['a']); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readErr error
	reads := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			f, err := os.Open(filepath.Join(dir, latestName))
			if err != nil {
				readErr = fmt.Errorf("opening latest.pb.gz: %w", err)
				return
			}
			zr, err := gzip.NewReader(f)
			var data []byte
			if err == nil {
				data, err = io.ReadAll(zr)
			}
			f.Close()
			if err != nil {
				readErr = fmt.Errorf("read %d saw a partial file: %w", reads, err)
				return
			}
			if len(data) == 0 || len(data) != payloads[data[0]] || bytes.Count(data, data[:1]) != len(data) {
				readErr = fmt.Errorf("read %d saw %d bytes that are no single payload", reads, len(data))
				return
			}
			reads++
		}
	}()
	for i := range 200 {
		if _, err := s.write(encoded["bca"[i%3]]); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	if reads == 0 {
		t.Fatal("the reader never completed a read")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	t.Logf("%d complete reads during 200 replacements", reads)
}

// TestLinksInDirectoryNotFollowed plants symlinks under the names the store
// writes and rotates: the files they point at must stay as they were, and
// what the store writes must be regular files readable by others.
func TestLinksInDirectoryNotFollowed(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("not a profile"), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := []string{
		latestName,
		exportPrefix + "19990101T000000.000000000Z" + exportSuffix,
		exportPrefix + "19990101T000000.000000001Z" + exportSuffix,
	}
	for _, name := range planted {
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	s := newFileStore(dir, 1)
	if err := s.open(); err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var written string
	for i := range 3 {
		path, err := s.write([]byte(fmt.Sprintf("export %d", i)))
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		written = path
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "not a profile" {
		t.Errorf("the file a planted link points at holds %q (%v)", data, err)
	}
	if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the file a planted link points at changed mode: %v (%v)", fi.Mode(), err)
	}
	for _, path := range []string{written, filepath.Join(dir, latestName)} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want a regular file with mode 0644", path, fi.Mode())
		}
	}
	// Rotation counts only regular files: the planted links stay, and
	// so does the one export kept.
	for _, name := range planted[1:] {
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s: rotation touched a link it does not own: %v", name, err)
		}
	}
	var kept []string
	for _, path := range exportFiles(t, dir) {
		if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
			kept = append(kept, path)
		}
	}
	if len(kept) != 1 || kept[0] != written {
		t.Errorf("kept %v, want only %s", kept, written)
	}
}

// TestDirectorySwappedForLink replaces the directory by a link after open:
// the store keeps writing into the directory it opened, never through the
// link.
func TestDirectorySwappedForLink(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "profiles")
	outside := t.TempDir()
	s := newFileStore(dir, 2)
	if err := s.open(); err != nil {
		t.Fatal(err)
	}
	defer s.close()
	moved := filepath.Join(parent, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.write([]byte("export")); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(outside); err != nil || len(entries) != 0 {
		t.Errorf("the link's target holds %d entries (%v), want none", len(entries), err)
	}
	if data, err := os.ReadFile(filepath.Join(moved, latestName)); err != nil || string(data) != "export" {
		t.Errorf("the opened directory's latest.pb.gz holds %q (%v)", data, err)
	}
}
