package debuginfod

import (
	"context"
	"errors"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/symbolize/debugcache"
	"github.com/bpfcol/bpfcol/internal/testdebuginfod"
)

// hugeBody is what a hostile server offers: 2 GiB.
const hugeBody = 2 << 30

// streamHuge writes first, then fill until hugeBody bytes or the client
// leaves, without a Content-Length, and counts what it wrote.
func streamHuge(first []byte, fill func([]byte), wrote *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, _ := w.Write(first)
		wrote.Add(int64(n))
		buf := make([]byte, 64<<10)
		for total := int64(len(first)); total < hugeBody; total += int64(len(buf)) {
			fill(buf)
			n, err := w.Write(buf)
			wrote.Add(int64(n))
			if err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
}

func newTestClient(t *testing.T, url string, timeout time.Duration) (*Client, *debugcache.Cache, string) {
	t.Helper()
	cfg, err := ConfigFromEnv(Config{URLs: []string{url}, Timeout: timeout, Retries: -1}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxSize != 1<<30 {
		t.Errorf("default max size %d, want 1 GiB", cfg.MaxSize)
	}
	dir := t.TempDir()
	cache, err := debugcache.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	return New(cfg), cache, dir
}

// TestHostileBodiesRejectedEarly: bodies only a faulty or hostile server
// sends are rejected after their first wrong bytes, counted as invalid
// (the README's parse_failure), their bytes counted, and nothing is left
// in the cache, temporary files included.
func TestHostileBodiesRejectedEarly(t *testing.T) {
	elfs := buildELFs(t, 2)
	want, other := elfs[0], elfs[1]
	zeros := func(b []byte) { clear(b) }
	rng := rand.New(rand.NewSource(1))
	garbage := func(b []byte) { rng.Read(b) }
	for _, tc := range []struct {
		name    string
		first   []byte
		fill    func([]byte)
		atMost  int64 // bytes the check may need before it decides
		invalid bool
	}{
		// Decided at the first byte.
		{"zeros-without-length", nil, zeros, copyBuffer, true},
		// A real ELF header, then garbage: decided once the section
		// headers the header points at are in.
		{"elf-header-then-garbage", want.data[:64], garbage, int64(len(want.data)) + copyBuffer, true},
		// Another file's build-id, then zeros: decided at its note.
		{"wrong-build-id", other.data, zeros, int64(len(other.data)) + copyBuffer, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wrote atomic.Int64
			srv := httptest.NewServer(streamHuge(tc.first, tc.fill, &wrote))
			defer srv.Close()
			c, cache, dir := newTestClient(t, srv.URL, time.Minute)
			res, err := c.Fetch(context.Background(), want.id, cache, nil)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Fetch = %v, want ErrInvalid", err)
			}
			if res.Bytes <= 0 || res.Bytes > tc.atMost {
				t.Errorf("counted %d bytes received, want 1..%d", res.Bytes, tc.atMost)
			}
			if c.BytesReceived() != res.Bytes {
				t.Errorf("client counted %d bytes, the fetch %d", c.BytesReceived(), res.Bytes)
			}
			if l := leftovers(t, dir); len(l) != 0 || cache.Size() != 0 {
				t.Errorf("cache holds %v (%d bytes) after a rejected download", l, cache.Size())
			}
			t.Logf("rejected after %d bytes received (%d written by the server)", res.Bytes, wrote.Load())
		})
	}
}

// TestAdvertisedSizeBounded: a Content-Length or X-Debuginfod-Size above
// the limit is refused before one body byte is read.
func TestAdvertisedSizeBounded(t *testing.T) {
	want := buildELFs(t, 1)[0]
	for _, h := range []string{"Content-Length", "X-Debuginfod-Size"} {
		t.Run(h, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(h, strconv.Itoa(hugeBody))
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				w.Write(want.data) // never read
				<-r.Context().Done()
			}))
			defer srv.Close()
			c, cache, dir := newTestClient(t, srv.URL, time.Minute)
			res, err := c.Fetch(context.Background(), want.id, cache, nil)
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Fetch = %v, want ErrTooLarge", err)
			}
			if res.Bytes != 0 || c.BytesReceived() != 0 {
				t.Errorf("read %d body bytes of an oversized response", res.Bytes)
			}
			if l := leftovers(t, dir); len(l) != 0 {
				t.Errorf("cache holds %v", l)
			}
		})
	}
}

// TestSlowDripTimesOut: a valid file dripped one byte at a time is cut at
// the timeout, a network failure (not invalid), every byte counted and no
// temporary file left.
func TestSlowDripTimesOut(t *testing.T) {
	want := buildELFs(t, 1)[0]
	var wrote atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, b := range want.data {
			if _, err := w.Write([]byte{b}); err != nil {
				return
			}
			wrote.Add(1)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	c, cache, dir := newTestClient(t, srv.URL, 500*time.Millisecond)
	res, err := c.Fetch(context.Background(), want.id, cache, nil)
	if err == nil || errors.Is(err, ErrInvalid) {
		t.Fatalf("Fetch = %v, want a timeout", err)
	}
	if res.Bytes == 0 || res.Bytes > wrote.Load() || c.BytesReceived() != res.Bytes {
		t.Errorf("counted %d bytes (client %d), server wrote %d", res.Bytes, c.BytesReceived(), wrote.Load())
	}
	if l := leftovers(t, dir); len(l) != 0 {
		t.Errorf("cache holds %v after a timeout", l)
	}
}

// TestRealServer: a real debuginfod serves real debug files; each lands
// under its build-id, whole, its bytes counted, and a symlinked NN
// directory planted in the cache is removed, not written through.
func TestRealServer(t *testing.T) {
	elfs := buildELFs(t, 2)
	served := t.TempDir()
	for i, e := range elfs {
		if err := os.WriteFile(filepath.Join(served, "w"+strconv.Itoa(i)), e.data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	url := testdebuginfod.Start(t, served, elfs[0].id, elfs[1].id)
	c, cache, dir := newTestClient(t, url, time.Minute)

	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".build-id"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, ".build-id", elfs[1].id[:2])
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}

	var total int64
	for _, e := range elfs {
		res, err := c.Fetch(context.Background(), e.id, cache, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Size != int64(len(e.data)) || res.Bytes != res.Size {
			t.Errorf("%s: size %d, %d bytes received, want %d", e.id, res.Size, res.Bytes, len(e.data))
		}
		total += res.Bytes
		if p, _ := cache.Path(e.id); !fileEquals(p, e.data) {
			t.Errorf("%s does not hold the served file", p)
		}
	}
	if c.BytesReceived() != total {
		t.Errorf("client counted %d bytes, fetches %d", c.BytesReceived(), total)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("planted link still in place: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("download written through the planted link: %v", ents)
	}
	if cache.Corrupt() == 0 {
		t.Error("planted link not counted as corrupt")
	}
}

// TestTempCountsTowardCacheSize: a download in progress takes room in the
// cache as it is written, evicting older files.
func TestTempCountsTowardCacheSize(t *testing.T) {
	elfs := buildELFs(t, 2)
	release := make(chan struct{})
	half := len(elfs[1].data) / 2
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, e := range elfs {
			if r.URL.Path == "/buildid/"+e.id+"/debuginfo" {
				if e.id == elfs[1].id {
					w.Write(e.data[:half])
					w.(http.Flusher).Flush()
					<-release
					w.Write(e.data[half:])
					return
				}
				w.Write(e.data)
			}
		}
	}))
	defer srv.Close()
	cfg, _ := ConfigFromEnv(Config{URLs: []string{srv.URL}, Timeout: time.Minute, Retries: -1}, func(string) string { return "" })
	c := New(cfg)
	max := int64(len(elfs[0].data) + len(elfs[1].data)/4)
	cache, err := debugcache.Open(t.TempDir(), max)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(context.Background(), elfs[0].id, cache, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := c.Fetch(context.Background(), elfs[1].id, cache, nil)
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for cache.Len() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if cache.Len() != 0 || cache.Size() < int64(half) || cache.Size() > max {
		t.Errorf("mid-download: %d files, %d bytes; want the older file evicted for the %d bytes in flight, at most %d", cache.Len(), cache.Size(), half, max)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if cache.Size() > max || cache.Len() != 1 {
		t.Errorf("after: %d files, %d bytes, limit %d", cache.Len(), cache.Size(), max)
	}
}
