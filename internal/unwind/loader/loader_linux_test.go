package loader

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

func newStore(t testing.TB, onBuilt func(process.FileKey, *cfi.Entry)) *cfi.Store[process.FileKey] {
	store := cfi.NewStore[process.FileKey](cfi.StoreConfig{MaxBytes: 256 << 20, QueueLen: 64}, onBuilt)
	t.Cleanup(func() { store.Close() })
	return store
}

// testLoader is a loader over a real sampler and table store, wired as
// the receiver wires them: the store tells the loader of each build, the
// sampler's notices go to the loader, and Run serves them.
type testLoader struct {
	*Loader
	s     *profiler.Sampler
	store *cfi.Store[process.FileKey]
}

// newTestLoader starts one; opts configures the sampler, cfg the loader
// (Sink and Tables are filled in). With run false, the test serves the
// loader itself.
func newTestLoader(t testing.TB, opts profiler.Options, cfg Config, run bool) *testLoader {
	t.Helper()
	testenv.RequireBPF(t)
	s, err := profiler.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tl := &testLoader{s: s}
	tl.store = newStore(t, func(key process.FileKey, _ *cfi.Entry) { tl.Built(key) })
	cfg.Sink, cfg.Tables = s, tl.store
	tl.Loader = New(cfg)
	pumpNotices(t, s, tl.Noted)
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); tl.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	return tl
}

// pumpNotices hands s's notices to noted until the test ends, polling for
// those sent without a wakeup.
func pumpNotices(t testing.TB, s *profiler.Sampler, noted func(*profiler.Notice)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var n profiler.Notice
		for {
			if err := s.ReadNotice(&n); err != nil {
				return
			}
			noted(&n)
		}
	}()
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				s.PollNotices()
			}
		}
	}()
	t.Cleanup(func() { close(stop); s.Close(); <-done })
}

// waitReady waits until pid's tables are loaded.
func waitReady(t testing.TB, l *testLoader, pid int) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool { return l.Ready(uint32(pid)) }, "pid %d's tables loaded: %+v", pid, l)
}

// waitSettled waits until pid's tables are loaded, every file its stacks
// enter asked for, and no build is left.
func waitSettled(t testing.TB, l *testLoader, pid int) {
	t.Helper()
	waitReady(t, l, pid)
	time.Sleep(time.Second)
	waitFor(t, 30*time.Second, func() bool { return l.store.Stats().Queued == 0 }, "builds done: %+v", l)
	waitReady(t, l, pid)
}

// waitFor waits until cond holds, failing after d with the message.
func waitFor(t testing.TB, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			for i, a := range args {
				if l, ok := a.(*testLoader); ok {
					args[i] = l.Stats()
				}
			}
			t.Fatalf("not after %v: "+format, append([]any{d}, args...)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startBusy(t testing.TB, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	time.Sleep(100 * time.Millisecond) // past exec and the dynamic loader
	return cmd
}

// A sqlite3 query that never ends, and a python3.11 loop: both busy in
// their libraries.
var (
	sqliteArgs = []string{":memory:", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c;"}
	pythonArgs = []string{"-c", "import json\nwhile True: json.loads(json.dumps([{'k': i} for i in range(500)]))"}
)

// stopFor stops cmd (SIGSTOP) and waits until its tables are staler than
// any being walked: its files stay mapped, no walk reads them.
func stopFor(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
}

// TestLoaderEvictsLeastRecentlyUsed loads the tables of two processes into
// a row store too small for both: the tables of the one no longer walked
// are evicted, the store stays within its bound, and the evicted files
// are left pending, not pointing at reused rows; a sweep does not evict
// the walked process's tables back for them.
func TestLoaderEvictsLeastRecentlyUsed(t *testing.T) {
	// sqlite3's tables take about 66k row slots with their indexes
	// (libsqlite3, libc...), python3.11's about 106k (its binary alone
	// 65k rows), libc, libm, libz and ld.so shared: 110k slots hold
	// either, not both. Only these two are
	// sampled: the tables of whatever else runs on the host stay out.
	sq := startBusy(t, "/usr/bin/sqlite3", sqliteArgs...)
	py := startStopped(t, "/usr/bin/python3.11", pythonArgs...)
	l := newTestLoader(t, profiler.Options{Frequency: 99, UnwindRows: 110000, PIDs: []int{sq.Process.Pid, py.Process.Pid}},
		Config{SweepInterval: 200 * time.Millisecond}, true)
	waitSettled(t, l, sq.Process.Pid)
	first := l.Stats()
	t.Logf("after sqlite3: %+v", first)
	stopFor(t, sq)
	cont(t, py)
	waitSettled(t, l, py.Process.Pid)
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
	// Sweeps retry the evicted files, which are staler: they must not
	// evict python3.11's tables back.
	time.Sleep(time.Second)
	if !l.Ready(uint32(py.Process.Pid)) || l.Stats().Evictions != second.Evictions {
		t.Fatalf("a sweep evicted tables: %+v", l.Stats())
	}
}

// startStopped starts a busy process and stops it (SIGSTOP) past its exec
// and dynamic loader, so that it exists for a sampler of its threads yet
// is not sampled until cont.
func startStopped(t *testing.T, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := startBusy(t, path, args...)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func cont(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// TestLoaderCountsExitedProcesses checks that a process read and then
// exited is counted in, then out, from the sampler's notices.
func TestLoaderCountsExitedProcesses(t *testing.T) {
	cmd := startBusy(t, "/usr/bin/python3.11", pythonArgs...)
	pid := cmd.Process.Pid
	// Only this process is sampled.
	l := newTestLoader(t, profiler.Options{Frequency: 99, PID: pid}, Config{}, true)
	waitReady(t, l, pid)
	if got := l.Stats().Processes; got != 1 {
		t.Fatalf("%d processes held, want 1", got)
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitFor(t, 10*time.Second, func() bool { return l.Stats().Processes == 0 }, "exited process still counted: %+v", l)
	if _, _, ok, err := l.s.UnwindMappings(uint32(pid)); ok || err != nil {
		t.Fatalf("exited process still held (%v)", err)
	}
	if _, err := os.Stat("/proc/" + itoa(pid)); err == nil {
		t.Fatal("the process did not exit")
	}
}

// TestLoaderDropsIdleFiles checks that the tables of files no walk reads
// any more (their processes exited) are kept only up to MaxIdleFiles:
// processes started from fresh copies of a binary leave no trail.
func TestLoaderDropsIdleFiles(t *testing.T) {
	const maxIdle = 1
	cmd := startBusy(t, "/usr/bin/python3.11", pythonArgs...)
	l := newTestLoader(t, profiler.Options{Frequency: 99, PID: cmd.Process.Pid},
		Config{MaxIdleFiles: maxIdle, IdleAfter: 3 * time.Second, SweepInterval: 100 * time.Millisecond}, true)
	waitSettled(t, l, cmd.Process.Pid)
	loaded := l.Stats()
	if loaded.Files <= maxIdle {
		t.Fatalf("python3.11 loaded %d files' tables, want more than %d for the test", loaded.Files, maxIdle)
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitFor(t, 15*time.Second, func() bool { return l.Stats().Files <= maxIdle }, "idle tables kept: %+v", l)
	after := l.Stats()
	t.Logf("loaded: %+v; after the exit: %+v", loaded, after)
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

// TestLoaderReleasesLoadedTables checks ReleaseLoaded: once a file's table
// is in the row store, the store holds none of them in Go, and a process
// whose tables were evicted from the row store gets them back, built
// again, once it is walked again.
func TestLoaderReleasesLoadedTables(t *testing.T) {
	sq := startBusy(t, "/usr/bin/sqlite3", sqliteArgs...)
	py := startStopped(t, "/usr/bin/python3.11", pythonArgs...)
	l := newTestLoader(t, profiler.Options{Frequency: 99, UnwindRows: 110000, PIDs: []int{sq.Process.Pid, py.Process.Pid}},
		Config{ReleaseLoaded: true, SweepInterval: 200 * time.Millisecond}, true)
	waitSettled(t, l, sq.Process.Pid)
	st, ls := l.store.Stats(), l.Stats()
	t.Logf("after sqlite3: store %+v, loader %+v", st, ls)
	if ls.Files == 0 || st.Released < uint64(ls.Files) {
		t.Fatalf("%d tables released for %d files loaded", st.Released, ls.Files)
	}
	// Failed builds (files without CFI) stay, at a small fixed cost each.
	if st.Bytes > int64(st.Tables)*256 {
		t.Fatalf("the store still holds %d bytes in %d entries after loading", st.Bytes, st.Tables)
	}

	// python3.11 evicts sqlite3's tables (see
	// TestLoaderEvictsLeastRecentlyUsed); walked again, sqlite3 has them
	// built again.
	stopFor(t, sq)
	cont(t, py)
	waitSettled(t, l, py.Process.Pid)
	if l.Stats().Evictions == 0 || l.Ready(uint32(sq.Process.Pid)) {
		t.Fatalf("sqlite3's tables not evicted: %+v", l.Stats())
	}
	builds := l.store.Stats().Builds
	stopFor(t, py)
	cont(t, sq)
	waitReady(t, l, sq.Process.Pid)
	if l.store.Stats().Builds <= builds {
		t.Fatalf("sqlite3 ready again without a build: %+v", l.store.Stats())
	}
}

// TestLoaderSweepsOnTick checks that with SweepOnTick, Run sweeps (and so
// drops the idle tables of an exited process) when Tick finds a sweep
// due, and not before.
func TestLoaderSweepsOnTick(t *testing.T) {
	cmd := startBusy(t, "/usr/bin/python3.11", pythonArgs...)
	const maxIdle = 1
	l := newTestLoader(t, profiler.Options{Frequency: 99, PID: cmd.Process.Pid},
		Config{MaxIdleFiles: maxIdle, IdleAfter: time.Nanosecond, SweepInterval: time.Hour, SweepOnTick: true}, true)
	waitSettled(t, l, cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	loaded := l.Stats().Files
	if loaded <= maxIdle {
		t.Fatalf("python3.11 loaded %d files' tables, want more than %d for the test", loaded, maxIdle)
	}
	// Not due yet: the idle tables stay.
	l.Tick(time.Now())
	time.Sleep(200 * time.Millisecond)
	if got := l.Stats().Files; got != loaded {
		t.Fatalf("%d tables after a tick with no sweep due, want %d", got, loaded)
	}
	l.Tick(time.Now().Add(time.Hour))
	waitFor(t, 10*time.Second, func() bool { return l.Stats().Files <= maxIdle }, "idle tables kept after a tick with a sweep due: %+v", l)
}

// mappingOf returns pid's executable mapping of the file whose path
// contains name.
func mappingOf(t *testing.T, pid int, name string) process.Mapping {
	t.Helper()
	maps, err := process.ReadMappings(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Executable() && strings.Contains(m.Path, name) {
			return m
		}
	}
	t.Fatalf("pid %d maps no %s: %v", pid, name, maps)
	return process.Mapping{}
}

// fileNotice is the notice a walk of pid that enters m sends.
func fileNotice(pid int, m process.Mapping) *profiler.Notice {
	return &profiler.Notice{Kind: profiler.NoticeFile, PID: uint32(pid), Mappings: []profiler.UnwindMapping{
		{Start: m.Start, End: m.End, FileBase: m.Start - m.Offset, File: m.Key(), Kind: profiler.MappingFile, Prot: profiler.ProtRead | profiler.ProtExec},
	}}
}

// loadedIn reports whether the sampler walks m's file with a table.
func loadedIn(l *testLoader, m process.Mapping) bool {
	f, ok, err := l.s.LookupUnwindFile(m.Key())
	return err == nil && ok && f.State == profiler.FileCFI
}

// TestLoaderBuildsOnlyWhatWalksEnter checks that tables are built for the
// files sampled stacks enter, not for every file a process maps: a busy
// python3.11 gets its executable's table, and none for libz or libexpat,
// which it maps but does not run.
func TestLoaderBuildsOnlyWhatWalksEnter(t *testing.T) {
	cmd := startBusy(t, "/usr/bin/python3.11", pythonArgs...)
	pid := cmd.Process.Pid
	l := newTestLoader(t, profiler.Options{Frequency: 99, PID: pid}, Config{}, true)
	waitReady(t, l, pid)
	exe := mappingOf(t, pid, "python3.11")
	waitFor(t, 30*time.Second, func() bool { return loadedIn(l, exe) && l.Covers(uint32(pid), exe.Start) },
		"the executable's table loaded: %+v", l)
	time.Sleep(time.Second)
	for _, name := range []string{"libz.so", "libexpat.so"} {
		m := mappingOf(t, pid, name)
		if _, ok := l.store.Get(m.Key()); ok {
			t.Errorf("%s built though no walk entered it", m.Path)
		}
		if _, ok, _ := l.s.LookupUnwindFile(m.Key()); ok {
			t.Errorf("%s asked for though no walk entered it", m.Path)
		}
	}
}

// TestLoaderTableServesEveryProcess checks that a file's table, once
// loaded, serves a new process mapping the same file from its first
// sample: its mappings are read and walked with the tables already there,
// without a build.
func TestLoaderTableServesEveryProcess(t *testing.T) {
	first := startBusy(t, "/usr/bin/python3.11", pythonArgs...)
	second := startStopped(t, "/usr/bin/python3.11", pythonArgs...)
	l := newTestLoader(t, profiler.Options{Frequency: 99, PIDs: []int{first.Process.Pid, second.Process.Pid}}, Config{}, true)
	waitSettled(t, l, first.Process.Pid)
	builds := l.store.Stats().Builds
	cont(t, second)
	waitReady(t, l, second.Process.Pid)
	time.Sleep(time.Second)
	if got := l.store.Stats().Builds; got != builds {
		t.Fatalf("%d builds for a second process of the same files", got-builds)
	}
}

// holdWorker holds the store's build worker busy until the returned
// function is called, so that the next builds queue behind it.
func holdWorker(t *testing.T, l *testLoader) (release func()) {
	t.Helper()
	started, held := make(chan struct{}), make(chan struct{})
	l.store.Request(process.FileKey{Ino: ^uint64(0)}, func() (*os.File, error) {
		close(started)
		<-held
		return nil, os.ErrNotExist
	})
	<-started
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release)
	return release
}

// TestLoaderBuildOutlivesAsker: the process whose walk asked for a
// library's table exits before the build runs. The file was opened when
// asked for: the table is built all the same.
func TestLoaderBuildOutlivesAsker(t *testing.T) {
	l := newTestLoader(t, profiler.Options{Frequency: 1}, Config{}, true)
	asker := startBusy(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	libm := mappingOf(t, asker.Process.Pid, "libm.so")
	release := holdWorker(t, l)
	l.Noted(fileNotice(asker.Process.Pid, libm))
	waitFor(t, 30*time.Second, func() bool { return l.store.Stats().Queued >= 2 }, "libm's build asked for: %+v", l)
	asker.Process.Kill()
	asker.Wait()
	release()
	waitFor(t, 30*time.Second, func() bool { return loadedIn(l, libm) }, "%s loaded after its asker exited: %+v", libm.Path, l)
}

// TestLoaderBuildAfterAskerExited: the process whose walk asked for a
// library exited before the request was served. The library is not left
// to frame pointers for good: its entry goes, and the next process's walk
// in it gets its table built.
func TestLoaderBuildAfterAskerExited(t *testing.T) {
	l := newTestLoader(t, profiler.Options{Frequency: 1}, Config{}, false)
	asker := startBusy(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	libm := mappingOf(t, asker.Process.Pid, "libm.so")
	asker.Process.Kill()
	asker.Wait()
	l.tables.request(uint32(asker.Process.Pid), &fileNotice(asker.Process.Pid, libm).Mappings[0])
	if _, ok, err := l.s.LookupUnwindFile(libm.Key()); ok || err != nil {
		t.Fatalf("%s held though it could not be opened (%v)", libm.Path, err)
	}

	next := startBusy(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	l.Noted(fileNotice(next.Process.Pid, mappingOf(t, next.Process.Pid, "libm.so")))
	waitFor(t, 30*time.Second, func() bool { return loadedIn(l, libm) }, "%s loaded through the next process: %+v", libm.Path, l)
}

// TestLoaderReadsMappingsForKernelsWithout checks the loader's read of a
// process's mappings from /proc, which kernels where BPF cannot read them
// ask for: the sampler holds them for the image asked, as /proc shows
// them.
func TestLoaderReadsMappingsForKernelsWithout(t *testing.T) {
	l := newTestLoader(t, profiler.Options{Frequency: 1}, Config{}, false)
	cmd := startBusy(t, "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
	pid := cmd.Process.Pid
	img := profiler.Image{MM: 0xffff888012345000, StartNs: 42, Reads: 3}
	if err := l.Read(uint32(pid), img); err != nil {
		t.Fatal(err)
	}
	maps, got, ok, err := l.s.UnwindMappings(uint32(pid))
	if err != nil || !ok || got != img {
		t.Fatalf("held for image %+v (%v, %v), want %+v", got, ok, err, img)
	}
	want := mappingOf(t, pid, "libm.so")
	for _, m := range maps {
		if m.Start == want.Start {
			if m.End != want.End || m.File != want.Key() || m.Offset() != want.Offset || m.Kind != profiler.MappingFile {
				t.Fatalf("libm held as %+v, /proc shows %+v", m, want)
			}
			if l.Stats().Processes != 1 {
				t.Fatalf("%d processes counted", l.Stats().Processes)
			}
			cmd.Process.Kill()
			cmd.Wait()
			if err := l.Read(uint32(pid), img); err == nil || !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("reading an exited process: %v", err)
			}
			if l.Stats().LoadErrors != 0 {
				t.Fatalf("an exited process counted as a load error: %+v", l.Stats())
			}
			return
		}
	}
	t.Fatalf("libm at %#x not held: %+v", want.Start, maps)
}
