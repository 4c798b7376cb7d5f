package kernelsym

import (
	"errors"
	"testing"
	"time"
)

// TestResultCacheForgetsIdleAnswers caches answers for two kernel
// addresses, asks for one of them past resultMaxIdle, and checks that the
// next answer stored drops the other: kernel paths that processes long
// exited went through do not fill the cache toward its entry bound.
func TestResultCacheForgetsIdleAnswers(t *testing.T) {
	c := newResultCache(DefaultCacheEntries, coreText("amd64", nil))
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

// boundsFormatter is a formatter whose only answer is the text's bounds.
type boundsFormatter struct {
	formatter
	lo, hi uint64
	err    error
}

func (f boundsFormatter) TextBounds() (uint64, uint64, error) { return f.lo, f.hi, f.err }

// TestCoreTextBounds caches answers within the bounds the formatter looks
// up (arm64's kernel image, which KASLR places anywhere), none where they
// are hidden or cannot be looked up.
func TestCoreTextBounds(t *testing.T) {
	arm64 := boundsFormatter{lo: 0xffff800008010000, hi: 0xffff800008e00000}
	if got := coreText("arm64", arm64); got != [2]uint64{arm64.lo, arm64.hi} {
		t.Errorf("bounds %#x", got)
	}
	c := newResultCache(DefaultCacheEntries, coreText("arm64", arm64))
	sym := Symbol{Name: "f", OK: true}
	c.put(resultKey{addr: 0xffff800008020000}, sym)
	c.put(resultKey{addr: 0xffff800009020000}, sym)                 // past _etext
	c.put(resultKey{addr: 0xffff800008010000, isReturn: true}, sym) // looks up _stext-1
	if st := c.entries.Stats(); st.Len != 1 {
		t.Errorf("%d answers kept, want the one in the core text", st.Len)
	}
	for _, f := range []formatter{nil, boundsFormatter{}, boundsFormatter{err: errors.New("EINVAL")}} {
		if got := coreText("arm64", f); got != [2]uint64{} {
			t.Errorf("bounds %#x from %v", got, f)
		}
	}
}
