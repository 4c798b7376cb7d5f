package loader

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// newTestLoader loads a real sampler with a row store of rows rows and a
// loader over it, and waits for builds synchronously through Load.
func newStore(t testing.TB) *cfi.Store[process.FileKey] {
	store := cfi.NewStore[process.FileKey](cfi.StoreConfig{MaxBytes: 256 << 20, QueueLen: 64}, nil)
	t.Cleanup(func() { store.Close() })
	return store
}

func newTestLoader(t *testing.T, rows int) (*Loader, *cfi.Store[process.FileKey]) {
	t.Helper()
	testenv.RequireBPF(t)
	s, err := profiler.New(profiler.Options{Frequency: 1, UnwindRows: rows})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	store := newStore(t)
	return New(Config{Sink: s, Tables: store}), store
}

// loadAll loads pid until every table it needs was built.
func loadAll(t testing.TB, l *Loader, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := l.Load(uint32(pid)); err != nil {
			t.Fatalf("loading pid %d: %v", pid, err)
		}
		if l.Ready(uint32(pid)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not ready after 30s: %+v", pid, l.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startSleeper(t testing.TB, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	time.Sleep(100 * time.Millisecond) // past exec and the dynamic loader
	return cmd
}

// TestLoaderEvictsLeastRecentlyUsed loads two processes into a row store
// too small for both: the first one's tables are evicted, the store stays
// within its bound, and the evicted process is marked pending, not left
// pointing at reused rows.
func TestLoaderEvictsLeastRecentlyUsed(t *testing.T) {
	// sqlite3 needs about 78k rows (libsqlite3, libc...), python3.11
	// about 105k (its binary alone 65k), 38k of them shared (libc, libm,
	// libz, ld.so): 110k rows hold either, not both.
	l, _ := newTestLoader(t, 110000)
	sq := startSleeper(t, "/usr/bin/sqlite3", ":memory:", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c;")
	loadAll(t, l, sq.Process.Pid)
	first := l.Stats()
	t.Logf("after sqlite3: %+v", first)
	py := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	loadAll(t, l, py.Process.Pid)
	second := l.Stats()
	t.Logf("after python3.11: %+v", second)
	if second.Evictions == 0 {
		t.Fatalf("no eviction with a store of %d bytes: %+v", second.CapacityBytes, second)
	}
	if second.RowBytes > second.CapacityBytes {
		t.Fatalf("%d bytes of rows in a store of %d", second.RowBytes, second.CapacityBytes)
	}
	if l.Ready(uint32(sq.Process.Pid)) {
		t.Fatal("sqlite3 still ready after its tables were evicted")
	}
	// A sweep retries pending files with free room only: sqlite3 must not
	// evict python3.11's tables back.
	l.sweep()
	if !l.Ready(uint32(py.Process.Pid)) || l.Stats().Evictions != second.Evictions {
		t.Fatalf("a sweep evicted tables: %+v", l.Stats())
	}
}

// TestLoaderDropsExitedProcesses checks that a sweep forgets a process
// that exited.
func TestLoaderDropsExitedProcesses(t *testing.T) {
	l, _ := newTestLoader(t, 1<<20)
	cmd := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	pid := cmd.Process.Pid
	loadAll(t, l, pid)
	if got := l.Stats().Processes; got != 1 {
		t.Fatalf("%d processes loaded, want 1", got)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l.sweep()
	if got := l.Stats().Processes; got != 0 || l.Ready(uint32(pid)) {
		t.Fatalf("exited process still loaded: %d processes, ready %v", got, l.Ready(uint32(pid)))
	}
	if _, err := os.Stat("/proc/" + itoa(pid)); err == nil {
		t.Fatal("the process did not exit")
	}
}

// TestLoaderDropsIdleFiles checks that the files of exited processes keep
// their entries and rows only up to MaxIdleFiles: processes started from
// fresh copies of a binary leave no trail.
func TestLoaderDropsIdleFiles(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := profiler.New(profiler.Options{Frequency: 1, UnwindRows: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const maxIdle = 2
	l := New(Config{Sink: s, Tables: newStore(t), MaxIdleFiles: maxIdle})
	cmd := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	loadAll(t, l, cmd.Process.Pid)
	loaded := l.Stats()
	if loaded.Files <= maxIdle {
		t.Fatalf("python3.11 loaded %d files' tables, want more than %d for the test", loaded.Files, maxIdle)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l.sweep()
	after := l.Stats()
	t.Logf("loaded: %+v; after the exit: %+v", loaded, after)
	if after.Processes != 0 {
		t.Fatalf("%d processes still loaded", after.Processes)
	}
	if after.Files > maxIdle || len(l.files) > maxIdle {
		t.Errorf("%d tables and %d entries kept after the exit, want at most %d", after.Files, len(l.files), maxIdle)
	}
	if after.RowBytes >= loaded.RowBytes {
		t.Errorf("rows not released: %d bytes before, %d after", loaded.RowBytes, after.RowBytes)
	}
}

func itoa(n int) string {
	b := []byte{}
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestLoaderReleasesLoadedTables checks ReleaseLoaded: once a process's
// tables are in the row store, the store holds none of them in Go, and a
// process whose tables were evicted from the row store gets them back,
// built again.
func TestLoaderReleasesLoadedTables(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := profiler.New(profiler.Options{Frequency: 1, UnwindRows: 110000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	store := newStore(t)
	l := New(Config{Sink: s, Tables: store, ReleaseLoaded: true})

	sq := startSleeper(t, "/usr/bin/sqlite3", ":memory:", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c;")
	loadAll(t, l, sq.Process.Pid)
	st, ls := store.Stats(), l.Stats()
	t.Logf("after sqlite3: store %+v, loader %+v", st, ls)
	if ls.Files == 0 || st.Released < uint64(ls.Files) {
		t.Fatalf("%d tables released for %d files loaded", st.Released, ls.Files)
	}
	// Failed builds (files without CFI) stay, at a small fixed cost each.
	if st.Bytes > int64(st.Tables)*256 {
		t.Fatalf("the store still holds %d bytes in %d entries after loading", st.Bytes, st.Tables)
	}

	// python3.11 evicts sqlite3's tables (see
	// TestLoaderEvictsLeastRecentlyUsed); loading sqlite3 again builds
	// them again.
	py := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	loadAll(t, l, py.Process.Pid)
	if l.Stats().Evictions == 0 || l.Ready(uint32(sq.Process.Pid)) {
		t.Fatalf("sqlite3's tables not evicted: %+v", l.Stats())
	}
	builds := store.Stats().Builds
	l.mu.Lock()
	delete(l.lastLoad, uint32(sq.Process.Pid))
	l.mu.Unlock()
	loadAll(t, l, sq.Process.Pid)
	if store.Stats().Builds <= builds {
		t.Fatalf("sqlite3 ready again without a build: %+v", store.Stats())
	}
}

// TestLoaderSweepsOnTick checks that with SweepOnTick, Run sweeps (and so
// forgets an exited process) when Tick finds a sweep due, and not before.
func TestLoaderSweepsOnTick(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := profiler.New(profiler.Options{Frequency: 1, UnwindRows: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l := New(Config{Sink: s, Tables: newStore(t), SweepInterval: time.Hour, SweepOnTick: true})
	cmd := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	pid := cmd.Process.Pid
	loadAll(t, l, pid)
	cmd.Process.Kill()
	cmd.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Not due yet: the exited process stays.
	l.Tick(time.Now())
	time.Sleep(200 * time.Millisecond)
	if got := l.Stats().Processes; got != 1 {
		t.Fatalf("%d processes loaded after a tick with no sweep due, want 1", got)
	}
	l.Tick(time.Now().Add(time.Hour))
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Processes != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("exited process still loaded 10s after a tick with a sweep due: %+v", l.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newOnDemandLoader returns a loader with OnDemand on, over a real sampler
// and table store.
func newOnDemandLoader(t *testing.T) (*Loader, *cfi.Store[process.FileKey]) {
	t.Helper()
	testenv.RequireBPF(t)
	s, err := profiler.New(profiler.Options{Frequency: 1, UnwindRows: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// Wired as the receiver wires them: the store tells the loader of
	// each build.
	var l *Loader
	store := cfi.NewStore[process.FileKey](cfi.StoreConfig{MaxBytes: 256 << 20, QueueLen: 64}, func(key process.FileKey, _ *cfi.Entry) { l.Built(key) })
	t.Cleanup(func() { store.Close() })
	l = New(Config{Sink: s, Tables: store, OnDemand: true})
	return l, store
}

// TestLoaderOnDemand checks OnDemand: loading a process builds only its
// executable's table; a library it maps gets one only once a sample has a
// frame in it (a loaded process's sample, or the one that queued the
// load), and from then on the sampler walks it with CFI; a library no
// sample entered stays unbuilt.
func TestLoaderOnDemand(t *testing.T) {
	l, store := newOnDemandLoader(t)
	cmd := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	pid := cmd.Process.Pid
	maps, err := process.ReadMappings(pid)
	if err != nil {
		t.Fatal(err)
	}
	lib := func(name string) process.Mapping {
		t.Helper()
		for _, m := range maps {
			if m.Executable() && strings.Contains(m.Path, name) {
				return m
			}
		}
		t.Fatalf("python3.11 maps no %s: %v", name, maps)
		return process.Mapping{}
	}
	exe, libm, expat, libz := lib("python3.11"), lib("libm.so"), lib("libexpat.so"), lib("libz.so")
	built := func(m process.Mapping) bool {
		e, ok := store.Get(m.Key())
		return ok && e.Table != nil && len(e.Table.Rows) > 0
	}

	loadAll(t, l, pid)
	if !built(exe) || !l.Covers(uint32(pid), exe.Start) {
		t.Fatalf("the executable's table is not loaded: %+v", l.Stats())
	}
	for _, m := range []process.Mapping{libm, expat, libz} {
		if _, ok := store.Get(m.Key()); ok || l.Covers(uint32(pid), m.Start) {
			t.Fatalf("%s asked for before any sample entered it", m.Path)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitCovers := func(m process.Mapping) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !l.Covers(uint32(pid), m.Start) || !built(m) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not loaded 30s after a sample entered it: %+v", m.Path, l.Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A walked sample with its leaf in the executable and a return
	// address into libm.
	l.Observe(&profiler.Sample{PID: uint32(pid), TID: uint32(pid), CFI: true, User: []uint64{exe.Start + 16, libm.Start + 32}})
	waitCovers(libm)
	// A sample of a process not loaded yet (as after an exec) whose frame
	// pointer stack enters libexpat: the load it queues asks for it.
	l.Observe(&profiler.Sample{PID: uint32(pid), TID: uint32(pid), NoTable: true, User: []uint64{exe.Start + 16, expat.Start + 32}})
	waitCovers(expat)
	if _, ok := store.Get(libz.Key()); ok || l.Covers(uint32(pid), libz.Start) {
		t.Errorf("%s asked for though no sample entered it", libz.Path)
	}
	if !l.Ready(uint32(pid)) {
		t.Errorf("pid %d not ready with its sampled files loaded: %+v", pid, l.Stats())
	}
}

// TestLoaderOnDemandAfterFirstMapperExits: a deferred file is opened
// through the process whose sample wants it, not through the process it
// was first seen in, which may have exited meanwhile.
func TestLoaderOnDemandAfterFirstMapperExits(t *testing.T) {
	l, store := newOnDemandLoader(t)
	first := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	second := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	loadAll(t, l, first.Process.Pid)
	loadAll(t, l, second.Process.Pid)
	first.Process.Kill()
	first.Wait()

	pid := second.Process.Pid
	exe, libm := libmOf(t, pid)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	l.Observe(&profiler.Sample{PID: uint32(pid), TID: uint32(pid), CFI: true, User: []uint64{exe.Start + 16, libm.Start + 32}})
	deadline := time.Now().Add(30 * time.Second)
	for {
		e, ok := store.Get(libm.Key())
		if ok && e.Table != nil && len(e.Table.Rows) > 0 && l.Covers(uint32(pid), libm.Start) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not loaded 30s after a sample of pid %d entered it, its first mapper gone: %+v", libm.Path, pid, l.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// askThenExit runs l, has asker's sample enter libm while the store's
// worker is held, so that libm's build is queued, and kills asker before
// the worker is let go and the build runs.
func askThenExit(t *testing.T, l *Loader, store *cfi.Store[process.FileKey], asker *exec.Cmd) {
	t.Helper()
	exe, libm := libmOf(t, asker.Process.Pid)
	started, held := make(chan struct{}), make(chan struct{})
	store.Request(process.FileKey{Ino: ^uint64(0)}, func() (*os.File, error) {
		close(started)
		<-held
		return nil, os.ErrNotExist
	})
	<-started
	var once sync.Once
	release := func() { once.Do(func() { close(held) }) }
	t.Cleanup(release)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	l.Observe(&profiler.Sample{PID: uint32(asker.Process.Pid), TID: uint32(asker.Process.Pid), CFI: true, User: []uint64{exe.Start + 16, libm.Start + 32}})
	// The build is queued behind the held one.
	for deadline := time.Now().Add(30 * time.Second); store.Stats().Queued < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("libm's build was never asked for: %+v", l.Stats())
		}
	}
	asker.Process.Kill()
	asker.Wait()
	release()
}

// libmOf returns the executable mappings of python3.11 and libm in pid.
func libmOf(t *testing.T, pid int) (exe, libm process.Mapping) {
	t.Helper()
	maps, err := process.ReadMappings(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		switch {
		case !m.Executable():
		case strings.Contains(m.Path, "python3.11"):
			exe = m
		case strings.Contains(m.Path, "libm.so"):
			libm = m
		}
	}
	if exe.Path == "" || libm.Path == "" {
		t.Fatalf("python3.11 maps no executable or libm: %v", maps)
	}
	return exe, libm
}

// waitTableBuilt waits until libm's table is built and in the sampler
// for pid.
func waitTableBuilt(t *testing.T, l *Loader, store *cfi.Store[process.FileKey], pid int, libm process.Mapping) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		e, ok := store.Get(libm.Key())
		if ok && e.Table != nil && len(e.Table.Rows) > 0 && l.Covers(uint32(pid), libm.Start) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no table 30s after a sample of pid %d entered it: %+v (entry %+v)", libm.Path, pid, l.Stats(), e)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLoaderBuildOutlivesAsker: the process whose sample asked for a
// library's table exits before the build runs. The build opens the file
// through another process loaded with it, and the table is built.
func TestLoaderBuildOutlivesAsker(t *testing.T) {
	l, store := newOnDemandLoader(t)
	asker := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	other := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	loadAll(t, l, other.Process.Pid)
	loadAll(t, l, asker.Process.Pid)
	askThenExit(t, l, store, asker)
	_, libm := libmOf(t, other.Process.Pid)
	waitTableBuilt(t, l, store, other.Process.Pid, libm)
}

// TestLoaderBuildAfterEveryMapperExited: every process loaded with a
// library exits before the build asked for it runs. The library is not
// left to frame pointers for good: the next process's sample in it gets
// its table built.
func TestLoaderBuildAfterEveryMapperExited(t *testing.T) {
	l, store := newOnDemandLoader(t)
	asker := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	loadAll(t, l, asker.Process.Pid)
	askThenExit(t, l, store, asker)
	// The failed build is done: nothing queued, nothing held.
	for deadline := time.Now().Add(30 * time.Second); store.Stats().Queued > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("libm's build never ran: %+v", store.Stats())
		}
	}

	next := startSleeper(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	pid := next.Process.Pid
	exe, libm := libmOf(t, pid)
	l.Observe(&profiler.Sample{PID: uint32(pid), TID: uint32(pid), CFI: true, NoTable: true})
	for deadline := time.Now().Add(30 * time.Second); !l.Ready(uint32(pid)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not loaded: %+v", pid, l.Stats())
		}
	}
	l.Observe(&profiler.Sample{PID: uint32(pid), TID: uint32(pid), CFI: true, User: []uint64{exe.Start + 16, libm.Start + 32}})
	waitTableBuilt(t, l, store, pid, libm)
}
