package kernelsym

import (
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// refuseKallsyms is the BPF path's opener: any call fails the test.
func refuseKallsyms(t *testing.T) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) {
		t.Error("the BPF path opened /proc/kallsyms")
		return nil, errors.New("kallsyms refused by the test")
	}
}

func newBPFSymbolizer(t *testing.T) *Symbolizer {
	t.Helper()
	testenv.RequireBPF(t)
	s, err := New(Options{OpenKallsyms: refuseKallsyms(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.Path() != PathBPF {
		t.Fatalf("Path() = %q, want %q", s.Path(), PathBPF)
	}
	return s
}

func TestBPFPathMatchesKernelRules(t *testing.T) {
	s := newBPFSymbolizer(t)
	ref := loadReference(t)

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	const n = 3*10240 + 17 // several runs of the program, one partial
	addrs, isReturn := ref.sample(rng, n)

	got, err := s.Symbolize(addrs, isReturn)
	if err != nil {
		t.Fatal(err)
	}
	diffs := ref.compare(addrs, isReturn, got)
	starts := 0
	for i, a := range addrs {
		if i%3 == 0 && a != 0 {
			starts++
		}
	}
	t.Logf("%d addresses (%d at a symbol start), %d mismatches", n, starts, len(diffs))
	for i, d := range diffs {
		if i == 20 {
			t.Errorf("... and %d more", len(diffs)-i)
			break
		}
		t.Error(d)
	}

	// Again, now mostly from the cache: the answers must not change.
	again, err := s.Symbolize(addrs, isReturn)
	if err != nil {
		t.Fatal(err)
	}
	if diffs := ref.compare(addrs, isReturn, again); len(diffs) > 0 {
		t.Errorf("%d mismatches from the cache, first: %s", len(diffs), diffs[0])
	}
	if st := s.Stats(); st.Cache.Hits == 0 {
		t.Errorf("no cache hits on the second pass: %+v", st)
	}
}

func TestBPFPathNamesVFSRead(t *testing.T) {
	s := newBPFSymbolizer(t)
	ref := loadReference(t)
	vfsRead := ref.addrOf(t, "vfs_read")
	size := ref.lookup(vfsRead, false).Size

	addrs := []uint64{vfsRead + size/2, vfsRead + size/3, vfsRead}
	got, err := s.Symbolize(addrs, []bool{false, true, true})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got[:2] {
		if !g.OK || g.Name != "vfs_read" || g.Module != "" || g.IsBPFProg {
			t.Errorf("address %#x: %+v, want vfs_read", addrs[i], g)
		}
	}
	// A return address at vfs_read's first byte belongs to the symbol before.
	if got[2].Name == "vfs_read" || !got[2].OK || got[2].Offset != got[2].Size {
		t.Errorf("return address at vfs_read's start: %+v, want the end of the preceding symbol", got[2])
	}
}

func TestBPFPathUnknownAddress(t *testing.T) {
	s := newBPFSymbolizer(t)
	got, err := s.Symbolize([]uint64{0x10, 0x10}, []bool{false, true})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if g.OK || g.Name != "" {
			t.Errorf("unknown address named %+v", g)
		}
	}
}

func TestBPFPathCacheIsBounded(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{OpenKallsyms: refuseKallsyms(t), CacheEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ref := loadReference(t)
	addrs, isReturn := ref.sample(rand.New(rand.NewPCG(1, 2)), 1000)
	got, err := s.Symbolize(addrs, isReturn)
	if err != nil {
		t.Fatal(err)
	}
	if diffs := ref.compare(addrs, isReturn, got); len(diffs) > 0 {
		t.Errorf("%d mismatches, first: %s", len(diffs), diffs[0])
	}
	st := s.Stats()
	if n := s.cache.entries.Len(); n > 100 || st.Cache.Len != n {
		t.Errorf("cache holds %d entries (stats say %d), bound is 100", n, st.Cache.Len)
	}
	if st.Cache.Evictions == 0 {
		t.Errorf("1000 addresses through a 100-entry cache evicted 0 entries: %+v", st)
	}
	if st.Cache.Len != 100 {
		t.Errorf("a full cache holds %d entries after evicting: it was emptied, not trimmed: %+v", st.Cache.Len, st)
	}
}

func TestClosedSymbolizer(t *testing.T) {
	s := newBPFSymbolizer(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Symbolize([]uint64{1}, []bool{false}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Symbolize after Close: %v, want a closed error", err)
	}
}
