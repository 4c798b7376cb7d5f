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
