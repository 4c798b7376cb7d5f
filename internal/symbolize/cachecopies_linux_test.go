//go:build linux

package symbolize

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// buildCopies writes n files of src into dir: exact copies (one build, as
// a deployment's new files are) when distinct is false, else each with
// its own GNU build id (n builds).
func buildCopies(t *testing.T, src, dir string, n int, distinct bool) []string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	if distinct {
		b := openWith(t, src, NewTables(1<<20))
		id, err := hex.DecodeString(b.BuildIDGNU())
		if err != nil || len(id) < 8 {
			t.Fatalf("%s has no GNU build id to vary: %q", src, b.BuildIDGNU())
		}
		if at = bytes.Index(data, id); at < 0 || bytes.Index(data[at+1:], id) >= 0 {
			t.Fatalf("%s: the build id is not in the file exactly once", src)
		}
	}
	paths := make([]string, n)
	for i := range paths {
		if distinct {
			binary.BigEndian.PutUint32(data[at:], uint32(i)^0x5eed0000)
		}
		paths[i] = filepath.Join(dir, fmt.Sprintf("%s-%d", filepath.Base(src), i))
		if err := os.WriteFile(paths[i], data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

// getAndName takes path's Binary from c and names addrs through it, as
// the receiver does for a sampled process.
func getAndName(t *testing.T, c *BinaryCache, path string, addrs []uint64) (id uint64, named int) {
	t.Helper()
	o := &countingOpener{path: path}
	b, err := c.Get(keyOf(t, path), o.open)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	for _, a := range addrs {
		if _, ok := b.Symbolize(a); ok {
			named++
		}
		b.FunctionStart(a)
	}
	return b.ID(), named
}

// TestBinaryCacheSharesCopiesOfABuild names the same addresses through
// many copies of a C binary with DWARF and of a Go binary, each copy a
// file of its own with its build's id, as processes started from fresh
// copies of one deployment are. The first copy of each build is opened
// and parsed; the others share it: the cache holds one Binary per build,
// and neither the cache's bytes, nor the parsed tables, nor the heap grow
// with the number of copies beyond the index of files.
func TestBinaryCacheSharesCopiesOfABuild(t *testing.T) {
	ws := builtWorkloads(t)
	parsed := NewTables(1 << 30) // nothing evicted: growth would show
	const n = 40
	dir := t.TempDir()
	builds := []string{ws["c-pie"].path, ws["go"].path}
	copies := make([][]string, len(builds))
	addrs := make([][]uint64, len(builds))
	for i, src := range builds {
		copies[i] = buildCopies(t, src, dir, n, false)
		addrs[i] = textAddresses(t, src, 300)
	}
	c := NewBinaryCache(64, 0, parsed)
	defer c.Close()

	before := heapInUse()
	ids := make([]uint64, len(builds))
	for i := range builds {
		var named int
		if ids[i], named = getAndName(t, c, copies[i][0], addrs[i]); named < len(addrs[i])/2 {
			t.Fatalf("%s: %d of %d addresses named: the tables were not read", copies[i][0], named, len(addrs[i]))
		}
	}
	first := heapInUse() - before
	held, tables := c.Stats(), parsed.Stats()

	for k := 1; k < n; k++ {
		for i := range builds {
			id, named := getAndName(t, c, copies[i][k], addrs[i])
			if id != ids[i] {
				t.Fatalf("copy %d of %s was opened apart from the first copy", k, builds[i])
			}
			if named < len(addrs[i])/2 {
				t.Fatalf("%s: %d of %d addresses named", copies[i][k], named, len(addrs[i]))
			}
		}
	}
	grown := heapInUse() - before - first
	t.Logf("the first copy of each build took %.0f KiB of heap; %d more copies %.0f KiB; binaries %d bytes, tables %d bytes, files index %d entries",
		float64(first)/1024, 2*(n-1), float64(grown)/1024, c.Stats().Cost, parsed.Stats().Cost, c.FileStats().Len)
	if c.Len() != len(builds) {
		t.Errorf("%d Binaries held for %d builds", c.Len(), len(builds))
	}
	if got := c.Stats(); got.Cost != held.Cost {
		t.Errorf("the cache's bytes grew with copies: %d -> %d", held.Cost, got.Cost)
	}
	if got := parsed.Stats(); got.Cost != tables.Cost || got.Len != tables.Len {
		t.Errorf("the parsed tables grew with copies: %d tables, %d bytes -> %d tables, %d bytes", tables.Len, tables.Cost, got.Len, got.Cost)
	}
	if got := c.FileStats().Len; got != 2*n {
		t.Errorf("the files index holds %d files, want %d", got, 2*n)
	}
	// Each copy costs an entry of the files index and nothing else that
	// stays: far less than the first copy's parse, with slack for the
	// runtime's own noise.
	if limit := int64(2*n)*2*fileEntryCost + 256<<10; grown > limit {
		t.Errorf("the heap grew %.0f KiB over %d copies (the first copies took %.0f KiB), more than %.0f KiB",
			float64(grown)/1024, 2*(n-1), float64(first)/1024, float64(limit)/1024)
	}
	runtime.KeepAlive(c)
}

// TestBinaryCacheStaysWithinItsByteBound opens many builds under a byte
// bound smaller than they take together: the least recently used go, the
// cost the cache reports stays within the bound, and the heap the cache
// holds stays within twice it (the accounting's honesty).
func TestBinaryCacheStaysWithinItsByteBound(t *testing.T) {
	ws := builtWorkloads(t)
	const n = 120
	paths := buildCopies(t, ws["c-pie"].path, t.TempDir(), n, true)
	unit := openWith(t, paths[0], NewTables(1<<20)).MemSize()
	bound := 20 * unit

	before := heapInUse()
	c := NewBinaryCache(n, bound, NewTables(0))
	defer c.Close()
	ids := map[uint64]bool{}
	for _, p := range paths {
		b, err := c.Get(keyOf(t, p), (&countingOpener{path: p}).open)
		if err != nil {
			t.Fatal(err)
		}
		ids[b.ID()] = true
		b.Release()
	}
	grown := heapInUse() - before
	st := c.Stats()
	t.Logf("bound %d bytes (%d per binary): %d held, cost %d, %d evictions; heap grew %d bytes, files index %d bytes",
		bound, unit, st.Len, st.Cost, st.Evictions, grown, c.FileStats().Cost)
	if len(ids) != n {
		t.Fatalf("%d Binaries for %d builds", len(ids), n)
	}
	if st.Evictions == 0 || st.Len >= n {
		t.Fatalf("stats %+v: no evictions under a bound of %d bytes", st, bound)
	}
	if st.Cost > bound {
		t.Errorf("cost %d above the bound %d", st.Cost, bound)
	}
	if limit := 2*bound + c.FileStats().Cost; grown > limit {
		t.Errorf("the heap grew %d bytes holding binaries within a bound of %d: the accounting misses more than half", grown, bound)
	}
	runtime.KeepAlive(c)
}
