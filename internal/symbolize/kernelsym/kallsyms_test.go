package kernelsym

import (
	"io"
	"strings"
	"testing"
)

// TestUnresolvedForgetsOldestOnly asks, in one batch, for more addresses
// no kernel symbol covers than maxUnresolved remembers, then for the newest
// maxUnresolved of them again: all of those are still known to be in no
// symbol, so the snapshot is not read again. Forgetting every address at
// once when full would read it again here.
func TestUnresolvedForgetsOldestOnly(t *testing.T) {
	const text = "ffffffff81000000 T _stext\nffffffff81001000 T other\nffffffff81002000 T _etext\n"
	k := newKallsymsSource(func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(text)), nil })
	// Not every BPF program seen: an unknown address may be a new one,
	// which is what makes a re-read worth it.
	k.changed = func() (uint64, bool) { return 1, false }

	const extra = 10
	addrs := make([]uint64, maxUnresolved+extra)
	for i := range addrs {
		addrs[i] = 0x1000 + uint64(i)*16
	}
	lookup := func(addrs []uint64) {
		t.Helper()
		out := make([]Symbol, len(addrs))
		if err := k.lookup(addrs, make([]bool, len(addrs)), out); err != nil {
			t.Fatal(err)
		}
		for i, s := range out {
			if s.OK {
				t.Fatalf("%#x named %q, want no symbol", addrs[i], s.Name)
			}
		}
	}
	lookup(addrs)
	if k.reads != 1 {
		t.Fatalf("kallsyms read %d times for the first batch, want once", k.reads)
	}
	lookup(addrs[extra:])
	if k.reads != 1 {
		t.Errorf("kallsyms read %d times: addresses just found in no symbol were forgotten", k.reads)
	}
	if s := k.unresolved.Stats(); s.Len != maxUnresolved || s.Evictions != extra {
		t.Errorf("unresolved set %+v: want %d held, %d forgotten", s, maxUnresolved, extra)
	}
}
