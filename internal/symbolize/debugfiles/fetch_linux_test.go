package debugfiles

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/symbolize/debugcache"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestFetchFailureWarningsSpaced points the Finder at a port nothing
// listens on: the first failed fetch is logged, naming the server; the
// next ones, within fetchFailureLogInterval, are counted and not logged.
func TestFetchFailureWarningsSpaced(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + lis.Addr().String()
	lis.Close()
	core, logs := observer.New(zapcore.WarnLevel)
	cache, err := debugcache.Open(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{SystemDebugDir: t.TempDir(), NegativeTTL: time.Minute, Logger: zap.New(core)},
		debuginfod.New(debuginfod.Config{URLs: []string{url}, Timeout: time.Second, Retries: -1}), cache)
	defer s.Close()
	ids := []string{strings.Repeat("ab", 20), strings.Repeat("cd", 20), strings.Repeat("ef", 20)}
	for _, id := range ids {
		if !s.Fetch(id) {
			t.Fatalf("fetch of %s not started", id)
		}
		for s.FetchPending(id) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if st := s.Stats(); st.FetchFailures != int64(len(ids)) {
		t.Fatalf("stats %+v: want %d fetch failures", st, len(ids))
	}
	warnings := logs.All()
	for _, e := range warnings {
		t.Logf("warning: %s %v", e.Message, e.ContextMap())
	}
	if len(warnings) != 1 {
		t.Fatalf("%d warnings for %d failed fetches within %v, want 1", len(warnings), len(ids), fetchFailureLogInterval)
	}
	if m := warnings[0].ContextMap(); m["build_id"] != ids[0] || !strings.Contains(fmt.Sprint(m["error"]), url) {
		t.Errorf("warning %v does not name build-id %s and server %s", m, ids[0], url)
	}
	if s.fetchUnlogged != len(ids)-1 {
		t.Errorf("%d failures counted as not logged, want %d", s.fetchUnlogged, len(ids)-1)
	}
}
