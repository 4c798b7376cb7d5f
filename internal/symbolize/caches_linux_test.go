package symbolize

import (
	"os"
	"strconv"
	"testing"

	"github.com/bpfcol/bpfcol/internal/process"
)

func openSelf(t *testing.T) *Binary {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBinary(f, NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDebugTablesEvictAndStayBounded fills the parsed-table cache past its
// byte budget: the least recently used tables go (their files closed once
// released), the rest stay, and a table larger than the budget is held
// alone rather than parsed again for every lookup.
func TestDebugTablesEvictAndStayBounded(t *testing.T) {
	unit := openSelf(t).MemSize() // headers only: nothing parsed yet
	tables := newDebugTables(3 * unit)
	var bins []*Binary
	for i := range 8 {
		b := openSelf(t)
		bins = append(bins, b)
		held := tables.add("t"+strconv.Itoa(i), b)
		if held != b {
			t.Fatalf("add returned another Binary")
		}
		held.Release()
		// Keep t0 recently used: it must survive the evictions.
		if dbg := tables.get("t0"); dbg != nil {
			dbg.Release()
		}
	}
	st := tables.stats()
	if st.Len != 3 || st.Cost > 3*unit || st.Evictions != 5 {
		t.Fatalf("stats %+v: want 3 tables within %d bytes after 5 evictions", st, 3*unit)
	}
	if dbg := tables.get("t0"); dbg == nil {
		t.Error("the most used table was evicted")
	} else {
		dbg.Release()
	}
	for _, i := range []int{1, 2, 3, 4, 5} {
		if _, err := bins[i].f.OS.Stat(); err == nil {
			t.Errorf("evicted table t%d still has its file open", i)
		}
	}
	if _, err := bins[7].f.OS.Stat(); err != nil {
		t.Errorf("held table t7 lost its file: %v", err)
	}

	small := newDebugTables(unit / 2)
	b := openSelf(t)
	if held := small.add("big", b); held != b {
		t.Fatal("a table larger than the budget was not held")
	} else {
		held.Release()
	}
	if dbg := small.get("big"); dbg == nil {
		t.Error("a table larger than the budget was dropped at once")
	} else {
		dbg.Release()
	}
	if err := tables.closeAll(); err != nil {
		t.Fatal(err)
	}
	if err := small.closeAll(); err != nil {
		t.Fatal(err)
	}
	if st := tables.stats(); st.Len != 0 || st.Cost != 0 {
		t.Errorf("after closeAll: %+v", st)
	}
}

// TestClassifiedEvictsAndStaysBounded classifies more binaries than the
// memo holds: it keeps the most recent maxClassified verdicts instead of
// starting over empty.
func TestClassifiedEvictsAndStaysBounded(t *testing.T) {
	s, err := NewSymbolizer(SymbolizerConfig{SystemDebugDir: t.TempDir(), Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bin := openSelf(t)
	defer bin.Close()
	const extra = 10
	for i := range maxClassified + extra {
		ref := MappingRef{Path: "/bin/self", Key: process.FileKey{Dev: 1, Ino: uint64(i + 1)}}
		if m := s.Classify(ref, bin); m != ModeProcess {
			t.Fatalf("classified as %v, want process mode (the test binary has .symtab)", m)
		}
	}
	st := s.CacheStats().Classified
	if st.Len != maxClassified || st.Evictions != extra {
		t.Fatalf("classified stats %+v: want %d verdicts after %d evictions", st, maxClassified, extra)
	}
	evaluated := s.Stats().ModeProcess
	// The most recent verdict is still known: classifying again evaluates nothing.
	s.Classify(MappingRef{Path: "/bin/self", Key: process.FileKey{Dev: 1, Ino: maxClassified + extra}}, bin)
	if got := s.Stats().ModeProcess; got != evaluated {
		t.Errorf("a kept verdict was evaluated again: %d -> %d", evaluated, got)
	}
	// The oldest is gone: it is evaluated afresh.
	s.Classify(MappingRef{Path: "/bin/self", Key: process.FileKey{Dev: 1, Ino: 1}}, bin)
	if got := s.Stats().ModeProcess; got != evaluated+1 {
		t.Errorf("an evicted verdict was served: %d -> %d", evaluated, got)
	}
}

// TestBinaryCacheEvictsAndStaysBounded opens more builds than the cache
// holds: the least recently used go, and the counts say so.
func TestBinaryCacheEvictsAndStaysBounded(t *testing.T) {
	ws := builtWorkloads(t)
	paths := buildCopies(t, ws["c-pie"].path, t.TempDir(), 10, true)
	openers := make([]*countingOpener, len(paths))
	for i, p := range paths {
		openers[i] = &countingOpener{path: p}
	}
	c := NewBinaryCache(3, 0, NewTables(0))
	defer c.Close()
	get := func(i int) {
		t.Helper()
		b, err := c.Get(keyOf(t, paths[i]), openers[i].open)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	opens := func() (n int64) {
		for _, o := range openers {
			n += o.opens.Load()
		}
		return n
	}
	for i := range paths {
		get(i)
		get(0) // keep 0 recently used
	}
	st := c.Stats()
	if st.Len != 3 || c.Len() != 3 || st.Evictions != 7 {
		t.Fatalf("stats %+v: want 3 binaries after 7 evictions", st)
	}
	before := opens()
	get(0)
	get(9)
	if got := opens(); got != before {
		t.Errorf("a held binary was opened again: %d -> %d opens", before, got)
	}
	get(1)
	if got := opens(); got != before+1 {
		t.Errorf("an evicted binary was served: %d -> %d opens", before, got)
	}
}
