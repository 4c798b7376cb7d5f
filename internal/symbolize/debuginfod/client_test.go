package debuginfod

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestValidBuildID(t *testing.T) {
	for id, want := range map[string]bool{
		"0123456789abcdef": true,
		"ab":               true,
		"ABCD":             false,
		"../etc":           false,
		"abc":              false,
		"ab/cd":            false,
		"":                 false,
	} {
		if got := ValidBuildID(id); got != want {
			t.Errorf("ValidBuildID(%q) = %v, want %v", id, got, want)
		}
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
		if _, err := ConfigFromEnv(Config{}, func(k string) string { return bad[k] }); err == nil {
			t.Errorf("ConfigFromEnv accepted %v", bad)
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
	release := make(chan struct{})
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.Add(1)
		<-release
		w.Write([]byte("debug"))
	}))
	defer good.Close()
	cfg, err := ConfigFromEnv(Config{URLs: []string{bad.URL, good.URL}, Timeout: 5 * time.Second, Retries: 1, Backoff: time.Millisecond}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	c := New(cfg)
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = c.Fetch(context.Background(), "abcd", filepath.Join(dir, "ab", "cd.debug"), nil)
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
	if got, _ := os.ReadFile(filepath.Join(dir, "ab", "cd.debug")); string(got) != "debug" {
		t.Errorf("stored %q", got)
	}
	// Another build-id: the bad server's third failure opens its breaker.
	if _, err := c.Fetch(context.Background(), "abce", filepath.Join(dir, "ab", "ce.debug"), nil); err != nil {
		t.Fatal(err)
	}
	if !c.BreakerOpen(bad.URL) || c.BreakerOpen(good.URL) {
		t.Errorf("breakers: bad open %v, good open %v; bad asked %d times", c.BreakerOpen(bad.URL), c.BreakerOpen(good.URL), down.Load())
	}
	before := down.Load()
	if _, err := c.Fetch(context.Background(), "abcf", filepath.Join(dir, "ab", "cf.debug"), nil); err != nil {
		t.Fatal(err)
	}
	if down.Load() != before {
		t.Error("a server with an open breaker was asked")
	}
	if _, err := c.Fetch(context.Background(), "../x", filepath.Join(dir, "x"), nil); !errors.Is(err, ErrInvalidBuildID) {
		t.Errorf("invalid build-id: %v", err)
	}
}
