package kernelsym

import (
	"runtime"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestResultCacheForgetsIdleAnswers caches answers for two kernel
// addresses, asks for one of them past resultMaxIdle, and checks that the
// next answer stored drops the other: kernel paths that processes long
// exited went through do not fill the cache toward its entry bound.
func TestResultCacheForgetsIdleAnswers(t *testing.T) {
	// Answers are cached for amd64 kernel text only.
	testenv.RequirePlatform(t, runtime.GOARCH == "amd64", "amd64")
	c := newResultCache(DefaultCacheEntries)
	now := time.Now()
	c.entries.SetClock(func() time.Time { return now })
	text := func(i uint64) resultKey { return resultKey{addr: amd64KernelTextStart + 0x1000*i} }
	sym := Symbol{Name: "f", OK: true}
	c.put(text(1), sym)
	c.put(text(2), sym)
	now = now.Add(resultMaxIdle / 2)
	if _, ok := c.get(text(1)); !ok {
		t.Fatal("an answer just stored is missing")
	}
	now = now.Add(resultMaxIdle/2 + time.Second)
	c.put(text(3), sym)
	if _, ok := c.entries.Peek(text(2)); ok {
		t.Errorf("an answer unused for longer than %s is still cached", resultMaxIdle)
	}
	if s := c.entries.Stats(); s.Len != 2 || s.Expired != 1 {
		t.Errorf("stats %+v: want 2 answers held, 1 expired", s)
	}
}
