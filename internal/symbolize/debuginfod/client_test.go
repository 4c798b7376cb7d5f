package debuginfod

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/symbolize/buildid"
	"github.com/bpfcol/bpfcol/internal/symbolize/debugcache"
)

// TestOneBuildIDRule: the client and the cache accept exactly the
// build-ids buildid.Valid accepts; "ab" is too short for the cache's
// NN/REST.debug layout and so for both.
func TestOneBuildIDRule(t *testing.T) {
	cache, err := debugcache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{URLs: []string{"http://127.0.0.1:1"}, Timeout: time.Second, Retries: -1})
	for _, id := range []string{"ab", "abcd", "0123456789abcdef0123456789abcdef01234567", "ABCD", "../etc", "abc", "ab/cd", ""} {
		_, fetchErr := c.Fetch(context.Background(), id, cache, nil)
		_, pathErr := cache.Path(id)
		want := buildid.Valid(id)
		if got := !errors.Is(fetchErr, ErrInvalidBuildID); got != want {
			t.Errorf("Fetch(%q) accepted the build-id: %v, buildid.Valid: %v (%v)", id, got, want, fetchErr)
		}
		if got := pathErr == nil; got != want {
			t.Errorf("cache Path(%q) accepted: %v, buildid.Valid: %v", id, got, want)
		}
	}
	if buildid.Valid("ab") {
		t.Error(`"ab" accepted: the cache layout needs 4 hex characters`)
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		"DEBUGINFOD_URLS":    "http://a.example https://b.example/x",
		"DEBUGINFOD_TIMEOUT": "7",
		"DEBUGINFOD_MAXSIZE": "1000",
	}
	c, err := ConfigFromEnv(Config{}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if len(c.URLs) != 2 || c.Timeout != 7*time.Second || c.MaxSize != 1000 {
		t.Errorf("from env: %+v", c)
	}
	// Config fields override the environment.
	c, err = ConfigFromEnv(Config{URLs: []string{"http://c.example"}, Timeout: time.Second, MaxSize: 5}, func(k string) string { return env[k] })
	if err != nil || len(c.URLs) != 1 || c.Timeout != time.Second || c.MaxSize != 5 {
		t.Errorf("overrides: %+v, %v", c, err)
	}
	for _, bad := range []map[string]string{
		{"DEBUGINFOD_TIMEOUT": "soon"},
		{"DEBUGINFOD_MAXSIZE": "-1"},
		{"DEBUGINFOD_URLS": "ftp://x"},
	} {
		_, err := ConfigFromEnv(Config{}, func(k string) string { return bad[k] })
		for name := range bad {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("ConfigFromEnv(%v) = %v, want an error naming %s", bad, err, name)
			}
		}
	}
}

// TestServersInOrderSingleflightBreaker: the first server fails at the
// network level until its breaker opens, the second serves; concurrent
// fetches of one build-id make one request.
func TestServersInOrderSingleflightBreaker(t *testing.T) {
	var down, up atomic.Int64
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		down.Add(1)
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	elfs := buildELFs(t, 4)
	byID := map[string][]byte{}
	for _, e := range elfs {
		byID[e.id] = e.data
	}
	release := make(chan struct{})
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.Add(1)
		<-release
		w.Write(byID[strings.Split(r.URL.Path, "/")[2]])
	}))
	defer good.Close()
	cfg, err := ConfigFromEnv(Config{URLs: []string{bad.URL, good.URL}, Timeout: 5 * time.Second, Retries: 1, Backoff: time.Millisecond}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	c := New(cfg)
	cache, err := debugcache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = c.Fetch(context.Background(), elfs[0].id, cache, nil)
		})
	}
	time.Sleep(200 * time.Millisecond)
	close(release)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if up.Load() != 1 {
		t.Errorf("good server asked %d times for one build-id, want 1", up.Load())
	}
	if p, _ := cache.Path(elfs[0].id); !fileEquals(p, elfs[0].data) {
		t.Errorf("%s does not hold the served file", p)
	}
	// Another build-id: the bad server's third failure opens its breaker.
	if _, err := c.Fetch(context.Background(), elfs[1].id, cache, nil); err != nil {
		t.Fatal(err)
	}
	if !c.BreakerOpen(bad.URL) || c.BreakerOpen(good.URL) {
		t.Errorf("breakers: bad open %v, good open %v; bad asked %d times", c.BreakerOpen(bad.URL), c.BreakerOpen(good.URL), down.Load())
	}
	before := down.Load()
	if _, err := c.Fetch(context.Background(), elfs[2].id, cache, nil); err != nil {
		t.Fatal(err)
	}
	if down.Load() != before {
		t.Error("a server with an open breaker was asked")
	}
	if _, err := c.Fetch(context.Background(), "../x", cache, nil); !errors.Is(err, ErrInvalidBuildID) {
		t.Errorf("invalid build-id: %v", err)
	}
}
