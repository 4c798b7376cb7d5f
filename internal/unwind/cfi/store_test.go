package cfi

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/stretchr/testify/require"
)

// waitBuilt returns an onBuilt callback and a channel receiving each key
// built.
func waitBuilt() (func(string, *Entry), chan string) {
	ch := make(chan string, 16)
	return func(k string, _ *Entry) { ch <- k }, ch
}

func recvKey(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case k := <-ch:
		return k
	case <-time.After(time.Minute):
		require.FailNow(t, "no build finished within a minute")
		return ""
	}
}

func opener(path string) func() (*os.File, error) {
	return func() (*os.File, error) { return os.Open(path) }
}

func fromELF(t *testing.T, path string) *Table {
	return compileFile(t, path, FromELF)
}

func TestStoreBuildsOnceAndEvictsLRU(t *testing.T) {
	paths := map[string]string{
		"libc":  "/lib/x86_64-linux-gnu/libc.so.6",
		"chain": build(t, "gcc", "chain", optFlags, "chain.c"),
		"exc":   build(t, "g++", "exc", optFlags, "exc.cc"),
	}
	want := map[string]*Table{}
	var total int64
	for k, p := range paths {
		want[k] = fromELF(t, p)
		total += want[k].Size()
	}
	onBuilt, built := waitBuilt()
	// Room for all three but one byte: the third build evicts one.
	s := NewStore[string](StoreConfig{MaxBytes: total - 1, QueueLen: 4}, onBuilt)
	defer s.Close()

	for _, k := range []string{"libc", "chain"} {
		require.True(t, s.Request(k, opener(paths[k])))
		require.Equal(t, k, recvKey(t, built))
		e, ok := s.Get(k)
		require.True(t, ok)
		require.NoError(t, e.Err)
		require.Equal(t, want[k].Rows, e.Table.Rows, "the store's table of %s", k)
		require.Positive(t, e.BuildTime)
	}
	// Held: a second request builds nothing.
	require.True(t, s.Request("libc", opener(paths["libc"])))
	st := s.Stats()
	require.EqualValues(t, 2, st.Builds)
	require.Equal(t, 2, st.Tables)
	require.Equal(t, want["libc"].Size()+want["chain"].Size(), st.Bytes)

	// libc was used last: chain is the least recently used.
	_, ok := s.Get("libc")
	require.True(t, ok)
	require.True(t, s.Request("exc", opener(paths["exc"])))
	require.Equal(t, "exc", recvKey(t, built))
	_, ok = s.Get("chain")
	require.False(t, ok, "the least recently used table is evicted")
	_, ok = s.Get("libc")
	require.True(t, ok)
	st = s.Stats()
	require.EqualValues(t, 1, st.Evictions)
	require.EqualValues(t, 3, st.Builds)
	require.Equal(t, want["libc"].Size()+want["exc"].Size(), st.Bytes)
	require.LessOrEqual(t, st.Bytes, total-1)
	require.Positive(t, st.BuildTime)
}

func TestStoreFailuresAndBounds(t *testing.T) {
	onBuilt, built := waitBuilt()
	// Tables measured by a BPF encoding of 8 bytes a row.
	bpfSize := func(t *Table) int64 { return 8 * int64(len(t.Rows)) }
	s := NewStore[string](StoreConfig{MaxBytes: 4096, QueueLen: 1, Size: bpfSize}, onBuilt)
	defer s.Close()

	// Not an ELF file: a failed entry, cached so it is not built again.
	require.True(t, s.Request("src", opener(filepath.Join("testdata", "chain.c"))))
	require.Equal(t, "src", recvKey(t, built))
	e, ok := s.Get("src")
	require.True(t, ok)
	require.Nil(t, e.Table)
	require.Error(t, e.Err)

	// libc's table is larger than the whole bound.
	require.True(t, s.Request("libc", opener("/lib/x86_64-linux-gnu/libc.so.6")))
	require.Equal(t, "libc", recvKey(t, built))
	e, ok = s.Get("libc")
	require.True(t, ok)
	require.ErrorIs(t, e.Err, ErrTooLarge)

	// Hold the worker in a build, fill the one-request queue: the next
	// request is dropped and counted, never blocking.
	gate := make(chan struct{})
	require.True(t, s.Request("held", func() (*os.File, error) {
		<-gate
		return nil, errors.New("gate")
	}))
	require.Eventually(t, func() bool { return len(s.queue) == 0 }, time.Minute, time.Millisecond)
	require.True(t, s.Request("queued", opener("/lib/x86_64-linux-gnu/libc.so.6")))
	require.True(t, s.Request("queued", opener("/lib/x86_64-linux-gnu/libc.so.6")), "a queued key is not queued twice")
	require.False(t, s.Request("dropped", opener("/lib/x86_64-linux-gnu/libc.so.6")))
	st := s.Stats()
	require.EqualValues(t, 1, st.Dropped)
	require.Equal(t, 2, st.Queued)
	close(gate)
	require.Equal(t, "held", recvKey(t, built))
	require.Equal(t, "queued", recvKey(t, built))
	st = s.Stats()
	require.EqualValues(t, 4, st.Builds)      // "dropped" never built
	require.EqualValues(t, 4, st.BuildErrors) // libc too large twice
	require.LessOrEqual(t, st.Bytes, int64(4096))
}

// TestStoreDebugFile builds a binary whose CFI is only in .debug_frame,
// strips it and keeps the .debug_frame in a separate debug file: the
// store's table must come from the debug file, found by build ID, and
// match the unstripped binary's.
func TestStoreDebugFile(t *testing.T) {
	flags := append([]string{"-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-Wl,--build-id"}, optFlags...)
	bin := build(t, "gcc", "chain-debug", flags, "chain.c")
	dbg, stripped := bin+".debug", bin+".stripped"
	for _, args := range [][]string{{"--only-keep-debug", bin, dbg}, {"--strip-debug", bin, stripped}} {
		out, err := exec.Command("objcopy", args...).CombinedOutput()
		require.NoError(t, err, "objcopy %v: %s", args, out)
	}
	ef, err := elf.Open(stripped)
	require.NoError(t, err)
	id := elfbin.GNUBuildID(ef)
	require.NotEmpty(t, id)
	require.Nil(t, ef.Section(".debug_frame"), "stripped")
	ef.Close()

	pending := true
	var asked []string
	onBuilt, built := waitBuilt()
	s := NewStore[string](StoreConfig{MaxBytes: 1 << 20, QueueLen: 4, RetryAfter: time.Nanosecond, DebugFile: func(buildID string) (*os.File, error) {
		asked = append(asked, buildID)
		if pending {
			return nil, ErrPending
		}
		return os.Open(dbg)
	}}, onBuilt)
	defer s.Close()

	// The debug file is being fetched: a partial table, marked pending.
	require.True(t, s.Request("bin", opener(stripped)))
	recvKey(t, built)
	e, ok := s.Get("bin")
	require.True(t, ok)
	require.ErrorIs(t, e.Err, ErrPending)
	if e.Table != nil {
		f, err := elf.Open(stripped)
		require.NoError(t, err)
		require.True(t, NeedsDebugFrame(f, e.Table))
		f.Close()
	}

	// RetryAfter has passed: the next request builds it again, now with
	// the debug file.
	pending = false
	require.True(t, s.Request("bin", opener(stripped)))
	recvKey(t, built)
	e, ok = s.Get("bin")
	require.True(t, ok)
	require.NoError(t, e.Err)
	require.Equal(t, fromELF(t, bin).Rows, e.Table.Rows)
	require.Equal(t, []string{id, id}, asked)

	// With the default RetryAfter, a pending table is not built again
	// right away.
	onBuilt2, built2 := waitBuilt()
	s2 := NewStore[string](StoreConfig{MaxBytes: 1 << 20, QueueLen: 4, DebugFile: func(string) (*os.File, error) {
		return nil, ErrPending
	}}, onBuilt2)
	defer s2.Close()
	require.True(t, s2.Request("bin", opener(stripped)))
	recvKey(t, built2)
	require.True(t, s2.Request("bin", opener(stripped)))
	require.EqualValues(t, 0, s2.Stats().Queued)
	require.EqualValues(t, 1, s2.Stats().Builds)
}

// TestStoreRelease drops a table once copied elsewhere: counted, the bytes
// freed, built again on the next request; an entry other than the one
// released, or one waiting for its debug file, is kept.
func TestStoreRelease(t *testing.T) {
	onBuilt, built := waitBuilt()
	s := NewStore[string](StoreConfig{MaxBytes: 64 << 20, QueueLen: 4}, onBuilt)
	defer s.Close()
	libc := opener("/lib/x86_64-linux-gnu/libc.so.6")

	require.True(t, s.Request("libc", libc))
	require.Equal(t, "libc", recvKey(t, built))
	e, ok := s.Get("libc")
	require.True(t, ok)
	require.NotNil(t, e.Table)
	require.Positive(t, s.Stats().Bytes)

	require.False(t, s.Release("libc", &Entry{Table: e.Table}), "an entry not held is not released")
	require.False(t, s.Release("libc", &Entry{Table: e.Table, Err: ErrPending}))
	_, ok = s.Get("libc")
	require.True(t, ok)

	require.True(t, s.Release("libc", e))
	_, ok = s.Get("libc")
	require.False(t, ok, "a released table is no longer held")
	st := s.Stats()
	require.EqualValues(t, 1, st.Released)
	require.Zero(t, st.Bytes)
	require.Zero(t, st.Tables)
	require.False(t, s.Release("libc", e), "released twice")

	// Asked again, it is built again.
	require.True(t, s.Request("libc", libc))
	require.Equal(t, "libc", recvKey(t, built))
	e2, ok := s.Get("libc")
	require.True(t, ok)
	require.Equal(t, e.Table.Rows, e2.Table.Rows)
	require.EqualValues(t, 2, s.Stats().Builds)

	// Waiting for a debug file: kept, so the retry finds it.
	pending := &Entry{Table: e2.Table, Err: ErrPending}
	s.cache.Add("pending", pending)
	require.False(t, s.Release("pending", pending))
	_, ok = s.Get("pending")
	require.True(t, ok)
}

// TestStoreOpenFailureNotHeld: a build whose binary could not be opened
// (the process it was opened through exited) is reported with ErrOpen but
// not held, so the next request, with another opener, builds the table.
func TestStoreOpenFailureNotHeld(t *testing.T) {
	var errs []error
	ch := make(chan string, 4)
	s := NewStore[string](StoreConfig{MaxBytes: 64 << 20, QueueLen: 4}, func(k string, e *Entry) {
		errs = append(errs, e.Err)
		ch <- k
	})
	defer s.Close()
	gone := func() (*os.File, error) { return os.Open("/proc/0/map_files/gone") }

	require.True(t, s.Request("libc", gone))
	require.Equal(t, "libc", recvKey(t, ch))
	require.ErrorIs(t, errs[0], ErrOpen)
	_, held := s.Get("libc")
	require.False(t, held, "a build that could not open its binary is not held")
	require.EqualValues(t, 1, s.Stats().BuildErrors)

	require.True(t, s.Request("libc", opener("/lib/x86_64-linux-gnu/libc.so.6")))
	require.Equal(t, "libc", recvKey(t, ch))
	require.NoError(t, errs[1])
	e, held := s.Get("libc")
	require.True(t, held)
	require.NotEmpty(t, e.Table.Rows)
}
