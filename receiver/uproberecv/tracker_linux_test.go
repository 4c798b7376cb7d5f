package uproberecv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/dirwatch"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/safefs"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// fakeAttacher stands in for the scope probes: attaching needs BPF, and a
// failed or slow attach cannot be produced on demand with the real one.
type fakeAttacher struct {
	// gate, when set, holds every Attach until it is closed; entered gets
	// a value when an Attach starts waiting on it.
	gate    chan struct{}
	entered chan struct{}
	// closeGate, when set, holds every Close of an attachment until it is
	// closed, as the kernel's unregistration waits for grace periods.
	closeGate chan struct{}
	// onAttach, when set, is called as each Attach begins.
	onAttach func()

	mu          sync.Mutex
	fail        error
	calls       int
	paths       []string
	files       []os.FileInfo // what each path named during its Attach
	sites       [][]scopeprobe.Site
	attachments []*fakeAttachment
}

type fakeAttachment struct {
	sites  int
	gate   chan struct{}
	closed atomic.Int32
}

func (a *fakeAttachment) Links() int { return a.sites }

func (a *fakeAttachment) Close() error {
	if a.gate != nil {
		<-a.gate
	}
	a.closed.Add(1)
	return nil
}

func (f *fakeAttacher) Attach(path string, sites []scopeprobe.Site) (attachment, error) {
	if f.onAttach != nil {
		f.onAttach()
	}
	f.mu.Lock()
	f.calls++
	f.paths = append(f.paths, path)
	fi, _ := os.Stat(path)
	f.files = append(f.files, fi)
	f.sites = append(f.sites, sites)
	fail := f.fail
	f.mu.Unlock()
	if f.gate != nil {
		f.entered <- struct{}{}
		<-f.gate
	}
	if fail != nil {
		return nil, fail
	}
	a := &fakeAttachment{sites: len(sites), gate: f.closeGate}
	f.mu.Lock()
	f.attachments = append(f.attachments, a)
	f.mu.Unlock()
	return a, nil
}

func (f *fakeAttacher) counts() (calls int, attachments []*fakeAttachment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, append([]*fakeAttachment(nil), f.attachments...)
}

// trackerFixture is a tracker on a real binary (matched by file_match,
// retaining nothing, unless told otherwise), and processes of it that
// wait (for a start file that never comes) until the test ends.
type trackerFixture struct {
	bin     string
	key     process.FileKey
	tracker *tracker
	fake    *fakeAttacher
	pids    []int
}

func newTrackerFixture(t *testing.T, fake *fakeAttacher, processes int) *trackerFixture {
	t.Helper()
	return newTrackerFixtureWith(t, fake, processes, trackerOptions{}, true)
}

// newTrackerFixtureWith is newTrackerFixture with options, the probe
// declared by file_match (a regex on the binary's path) when byMatch.
func newTrackerFixtureWith(t *testing.T, fake *fakeAttacher, processes int, opts trackerOptions, byMatch bool) *trackerFixture {
	t.Helper()
	bin := testworkload.BuildC(t, "scopesleep.c", "-O2", "-g", "-pthread")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := process.FileIDOf(fi)
	if !ok {
		t.Fatal("no device and inode for the workload")
	}
	cfg := []ProbeConfig{{ID: "sleep", Binary: bin, Entry: "scoped_sleep", Exit: "return"}}
	if byMatch {
		cfg[0].Binary, cfg[0].FileMatch = "", "^"+regexp.QuoteMeta(bin)+"$"
	}
	tr, err := newTracker(zaptest.NewLogger(t), cfg, fake, negcache.NewFiles(negativeTTL, maxNegative), process.NewInfoCache(64), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.close)
	fx := &trackerFixture{bin: bin, key: f.FileKey, tracker: tr, fake: fake}
	never := filepath.Join(t.TempDir(), "never")
	for range processes {
		cmd := testworkload.Start(t, bin, never, os.DevNull, "1")
		fx.pids = append(fx.pids, cmd.Process.Pid)
		waitExecMapped(t, cmd.Process.Pid, f.FileKey)
	}
	return fx
}

// waitExecMapped waits until pid maps key executable. Start returns once
// execve is past its point of no return, which closes the pipe it waits
// on before the kernel maps the new program's segments: a scan right
// then can find none yet. (A real exec event comes from
// sched_process_exec, after they are mapped.)
func waitExecMapped(t *testing.T, pid int, key process.FileKey) {
	t.Helper()
	mapped := func() bool {
		maps, err := process.ReadMappings(pid)
		if err != nil {
			return false
		}
		for i := range maps {
			if maps[i].Executable() && maps[i].Key() == key {
				return true
			}
		}
		return false
	}
	if !waitFor(10*time.Second, mapped) {
		t.Fatalf("process %d never mapped its program executable", pid)
	}
}

// within fails the test when fn does not return in time: the tracker's
// lock must not be held while an Attach waits.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked while an attach was under way", what)
	}
}

// TestTrackerRefcountsByProcess attaches a binary once for all the
// processes running it and detaches it when the last one exits.
func TestTrackerRefcountsByProcess(t *testing.T) {
	fake := &fakeAttacher{}
	fx := newTrackerFixture(t, fake, 3)
	for _, pid := range fx.pids {
		fx.tracker.exec(pid, process.FileID{}, "", 0)
	}
	calls, attachments := fake.counts()
	if calls != 1 || len(attachments) != 1 {
		t.Fatalf("%d attach calls for one binary run by 3 processes, want 1", calls)
	}
	if sites := fake.sites[0]; len(sites) < 2 || sites[0].ProbeID != 0 {
		t.Errorf("attached sites %+v, want an entry and exits of probe 0", sites)
	}
	attached := fake.files[0]
	want, _ := os.Stat(fx.bin)
	if attached == nil || !os.SameFile(attached, want) {
		t.Errorf("attached %s, not the workload %s", fake.paths[0], fx.bin)
	}
	if binaries, holders := fx.tracker.attachedCount(fx.key); binaries != 1 || holders != 3 {
		t.Fatalf("%d binaries with %d holders, want 1 with 3", binaries, holders)
	}
	fx.tracker.exit(fx.pids[0])
	fx.tracker.exit(fx.pids[1])
	if binaries, holders := fx.tracker.attachedCount(fx.key); binaries != 1 || holders != 1 {
		t.Fatalf("after 2 of 3 exits: %d binaries with %d holders, want 1 with 1", binaries, holders)
	}
	// Detached binaries are closed by a goroutine of their own.
	fx.tracker.detacher.wait()
	if n := attachments[0].closed.Load(); n != 0 {
		t.Fatalf("detached %d times while a process still runs the binary", n)
	}
	fx.tracker.exit(fx.pids[2])
	if binaries, _ := fx.tracker.attachedCount(fx.key); binaries != 0 {
		t.Fatalf("%d binaries attached after the last exit, want 0", binaries)
	}
	// Closed off the event loop: wait for the detacher.
	fx.tracker.detacher.wait()
	if n := attachments[0].closed.Load(); n != 1 {
		t.Fatalf("detached %d times after the last exit, want 1", n)
	}
	if got := fx.tracker.stats.detached.Load(); got != 1 {
		t.Errorf("detached stat %d, want 1", got)
	}
}

// TestTrackerDetachDoesNotHoldAttach checks that closing a detached
// binary's uprobes, which in the kernel waits for RCU grace periods (tens
// to hundreds of milliseconds), holds neither the exit that detached it
// nor the next exec's attach: both go on while the close is under way.
func TestTrackerDetachDoesNotHoldAttach(t *testing.T) {
	fake := &fakeAttacher{closeGate: make(chan struct{})}
	fx := newTrackerFixture(t, fake, 2)
	release := sync.OnceFunc(func() { close(fake.closeGate) })
	t.Cleanup(release)
	fx.tracker.exec(fx.pids[0], process.FileID{}, "", 0)
	done := make(chan struct{})
	go func() {
		// Its last process exits: detached (nothing is retained).
		fx.tracker.exit(fx.pids[0])
		// The binary runs again: attached afresh.
		fx.tracker.exec(fx.pids[1], process.FileID{}, "", 0)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the exit, or the next exec's attach, waited for the detached uprobes to close")
	}
	calls, attachments := fake.counts()
	if calls != 2 || !fx.tracker.isAttached(fx.key) {
		t.Fatalf("%d attach calls, attached %v: want the binary attached again while the old uprobes close", calls, fx.tracker.isAttached(fx.key))
	}
	if n := attachments[0].closed.Load(); n != 0 {
		t.Fatalf("old attachment closed %d times before its close could finish", n)
	}
	release()
	fx.tracker.detacher.wait()
	if n, m := attachments[0].closed.Load(), attachments[1].closed.Load(); n != 1 || m != 0 {
		t.Fatalf("closed %d and %d times, want the detached one once and the attached one not", n, m)
	}
}

// TestTrackerAttachLatencySplit checks that an exec's attach latency is
// split into the time before the attach call (the event's notice and the
// lookup) and the call itself, one sample each, that add up to no more
// than the latency the metric gets.
func TestTrackerAttachLatencySplit(t *testing.T) {
	fake := &fakeAttacher{}
	fx := newTrackerFixture(t, fake, 1)
	at := uint64(ktime.MonotonicNanos())
	fx.tracker.exec(fx.pids[0], process.FileID{}, "", at)
	n, latency, _ := fx.tracker.latency.percentiles(triggerExec)
	nb, before, _ := fx.tracker.attachCalls.percentiles(beforeCallKey)
	nc, call, _ := fx.tracker.attachCalls.percentiles(attachCallKey)
	if n != 1 || nb != 1 || nc != 1 {
		t.Fatalf("%d latency samples, %d before the call, %d of the call: want one each", n, nb, nc)
	}
	if before <= 0 || before+call > latency {
		t.Errorf("before the call %v, the call %v, the whole latency %v: want the parts within the whole", before, call, latency)
	}
}

// TestTrackerAttachesBeforeLogging checks that a binary's uprobes are
// attached before its probes' placements are logged: a logger that writes
// slowly (a pipe, a busy journal) must not add to the calls missed.
func TestTrackerAttachesBeforeLogging(t *testing.T) {
	fake := &fakeAttacher{}
	fx := newTrackerFixture(t, fake, 1)
	core, logs := observer.New(zap.InfoLevel)
	fx.tracker.logger = zap.New(core)
	placedBefore := -1
	fake.onAttach = func() { placedBefore = logs.FilterMessage("probe placement").Len() }
	fx.tracker.exec(fx.pids[0], process.FileID{}, "", 0)
	if placedBefore != 0 {
		t.Errorf("%d placements logged before the attach, want 0", placedBefore)
	}
	if n := logs.FilterMessage("probe placement").Len(); n != 1 {
		t.Errorf("%d placements logged, want 1", n)
	}
}

// TestTrackerConcurrentExecs evaluates a binary once when several of its
// processes exec at the same time, without holding the lock meanwhile.
func TestTrackerConcurrentExecs(t *testing.T) {
	fake := &fakeAttacher{gate: make(chan struct{}), entered: make(chan struct{}, 8)}
	fx := newTrackerFixture(t, fake, 4)
	var wg sync.WaitGroup
	for _, pid := range fx.pids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fx.tracker.exec(pid, process.FileID{}, "", 0)
		}()
	}
	<-fake.entered
	// Give the other execs time to find the binary pending; the assertions
	// below hold whichever way they interleave.
	time.Sleep(100 * time.Millisecond)
	within(t, "reading the attached totals", func() { fx.tracker.attachedTotals() })
	close(fake.gate)
	wg.Wait()
	calls, _ := fake.counts()
	if calls != 1 {
		t.Fatalf("%d attach calls for 4 concurrent execs of one binary, want 1", calls)
	}
	if got := fx.tracker.stats.evaluations.Load(); got != 1 {
		t.Errorf("binary evaluated %d times, want 1", got)
	}
	if binaries, holders := fx.tracker.attachedCount(fx.key); binaries != 1 || holders != 4 {
		t.Fatalf("%d binaries with %d holders, want 1 with 4", binaries, holders)
	}
}

// TestTrackerExitDuringAttach checks that a process exiting while its
// binary is being attached leaves nothing attached.
func TestTrackerExitDuringAttach(t *testing.T) {
	fake := &fakeAttacher{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	fx := newTrackerFixture(t, fake, 1)
	pid := fx.pids[0]
	done := make(chan struct{})
	go func() { fx.tracker.exec(pid, process.FileID{}, "", 0); close(done) }()
	<-fake.entered
	within(t, "the exit", func() { fx.tracker.exit(pid) })
	close(fake.gate)
	<-done
	fx.tracker.detacher.wait()
	_, attachments := fake.counts()
	// Detached binaries are closed by a goroutine of their own.
	fx.tracker.detacher.wait()
	if len(attachments) != 1 || attachments[0].closed.Load() != 1 {
		t.Fatalf("attachment of a process that exited meanwhile not detached once: %d attachments", len(attachments))
	}
	if binaries, holders := fx.tracker.attachedCount(fx.key); binaries != 0 || holders != 0 {
		t.Fatalf("%d binaries with %d holders after the exit, want none", binaries, holders)
	}
}

// TestTrackerFailedAttach checks that a failed attach attaches nothing,
// and that the failure is remembered by file identity and probe: the
// kernel refusing the site (EINVAL) is never retried for that file, and a
// transient failure (EAGAIN) is retried only after its backoff.
func TestTrackerFailedAttach(t *testing.T) {
	t.Run("permanent", func(t *testing.T) {
		fake := &fakeAttacher{fail: fmt.Errorf("creating uprobe_multi link: %w", unix.EINVAL)}
		fx := newTrackerFixture(t, fake, 3)
		fx.tracker.exec(fx.pids[0], process.FileID{}, "", 0)
		if binaries, _ := fx.tracker.attachedCount(fx.key); binaries != 0 {
			t.Fatalf("%d binaries attached after a failed attach, want 0", binaries)
		}
		fx.tracker.exec(fx.pids[1], process.FileID{}, "", 0)
		fx.tracker.exec(fx.pids[2], process.FileID{}, "", 0)
		if calls, _ := fake.counts(); calls != 1 {
			t.Fatalf("%d attach calls for three processes after the kernel refused the site, want 1", calls)
		}
		if got := fx.tracker.stats.evaluations.Load(); got != 1 {
			t.Errorf("binary evaluated %d times, want 1", got)
		}
		if got := fx.tracker.stats.negativeHits.Load(); got != 2 {
			t.Errorf("%d negative cache hits, want 2", got)
		}
	})
	t.Run("transient", func(t *testing.T) {
		now := time.Unix(1000, 0)
		var clockMu sync.Mutex
		clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
		advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }
		fake := &fakeAttacher{fail: fmt.Errorf("creating uprobe_multi link: %w", unix.EAGAIN)}
		fx := newTrackerFixtureWith(t, fake, 4, trackerOptions{now: clock}, false)
		fx.tracker.exec(fx.pids[0], process.FileID{}, "", 0)
		fx.tracker.exec(fx.pids[1], process.FileID{}, "", 0)
		if calls, _ := fake.counts(); calls != 1 {
			t.Fatalf("%d attach calls within the backoff, want 1", calls)
		}
		if got := fx.tracker.stats.negativeHits.Load(); got != 0 {
			t.Errorf("%d negative cache hits after a transient failure, want 0", got)
		}
		advance(retryFirst + time.Millisecond)
		fx.tracker.exec(fx.pids[2], process.FileID{}, "", 0)
		if calls, _ := fake.counts(); calls != 2 {
			t.Fatalf("%d attach calls after the backoff, want 2", calls)
		}
		fake.mu.Lock()
		fake.fail = nil
		fake.mu.Unlock()
		// The second failure doubled the backoff.
		advance(2*retryFirst + time.Millisecond)
		fx.tracker.exec(fx.pids[3], process.FileID{}, "", 0)
		if binaries, holders := fx.tracker.attachedCount(fx.key); binaries != 1 || holders != 1 {
			t.Fatalf("%d binaries with %d holders once attaching works, want 1 with 1", binaries, holders)
		}
		if got := fx.tracker.stats.evaluations.Load(); got != 1 {
			t.Errorf("binary evaluated %d times, want 1: the plan is cached, only the attach retried", got)
		}
	})
}

// TestTrackerRetains keeps a file_match binary attached after its last
// process exited, within retain's bounds: the next exec attaches nothing,
// age and count evict, and a changed file is attached afresh.
func TestTrackerRetains(t *testing.T) {
	now := time.Unix(1000, 0)
	var clockMu sync.Mutex
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }
	fake := &fakeAttacher{}
	opts := trackerOptions{now: clock, retain: RetainConfig{MaxBinaries: 1, MaxAge: time.Minute}}
	fx := newTrackerFixtureWith(t, fake, 3, opts, true)
	fx.tracker.exec(fx.pids[0], process.FileID{}, "", 0)
	fx.tracker.exit(fx.pids[0])
	if binaries, holders := fx.tracker.attachedCount(fx.key); binaries != 1 || holders != 0 {
		t.Fatalf("after the last exit: %d binaries with %d holders, want 1 retained", binaries, holders)
	}
	fx.tracker.exec(fx.pids[1], process.FileID{}, "", 0)
	calls, attachments := fake.counts()
	// Detached binaries are closed by a goroutine of their own.
	fx.tracker.detacher.wait()
	if calls != 1 || attachments[0].closed.Load() != 0 {
		t.Fatalf("%d attach calls for a retained binary's next process, want 1", calls)
	}
	if got := fx.tracker.stats.evaluations.Load(); got != 1 {
		t.Fatalf("binaries_evaluated %d after two execs of one binary, want 1", got)
	}
	fx.tracker.exit(fx.pids[1])
	advance(30 * time.Second)
	fx.tracker.sweep()
	if binaries, _ := fx.tracker.attachedCount(fx.key); binaries != 1 || fx.tracker.stats.evicted.Load() != 0 {
		t.Fatalf("evicted before retain.max_age (%d evictions counted)", fx.tracker.stats.evicted.Load())
	}
	advance(31 * time.Second)
	fx.tracker.sweep()
	fx.tracker.detacher.wait()
	if binaries, _ := fx.tracker.attachedCount(fx.key); binaries != 0 || attachments[0].closed.Load() != 1 {
		t.Fatalf("%d binaries after retain.max_age, want 0 and one detach", binaries)
	}
	if got := fx.tracker.stats.evicted.Load(); got != 1 {
		t.Fatalf("%d evictions counted after retain.max_age, want 1", got)
	}

	// The file changes in place (same inode, new mtime): attached afresh.
	fx.tracker.exec(fx.pids[2], process.FileID{}, "", 0)
	if err := os.Chtimes(fx.bin, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	fx.tracker.exec(fx.pids[2], process.FileID{}, "", 0)
	calls, attachments = fake.counts()
	// Detached binaries are closed by a goroutine of their own.
	fx.tracker.detacher.wait()
	if calls != 3 || attachments[1].closed.Load() != 1 {
		t.Fatalf("%d attach calls, second attachment closed %d times: a changed file must be detached and attached again",
			calls, attachments[1].closed.Load())
	}
	if got := fx.tracker.stats.evicted.Load(); got != 1 {
		t.Errorf("%d evictions counted, want 1: a changed file's detach is no eviction", got)
	}

	// A second binary idle beyond max_binaries evicts the older.
	other := filepath.Join(t.TempDir(), "copy")
	copyFile(t, fx.bin, other)
	fx.tracker.probes[0].match = regexp.MustCompile("^(" + regexp.QuoteMeta(fx.bin) + "|" + regexp.QuoteMeta(other) + ")$")
	cmd := testworkload.Start(t, other, filepath.Join(t.TempDir(), "never"), os.DevNull, "1")
	fx.tracker.exec(cmd.Process.Pid, process.FileID{}, "", 0)
	fx.tracker.exit(fx.pids[2])
	fx.tracker.exit(cmd.Process.Pid)
	if binaries, _ := fx.tracker.attachedCount(fx.key); binaries != 1 {
		t.Fatalf("%d binaries retained with max_binaries 1, want 1", binaries)
	}
	if binaries, _ := fx.tracker.attachedCount(keyOf(t, other)); binaries != 1 {
		t.Fatal("the binary idle longest was kept, the newer evicted")
	}
}

// TestTrackerPinsBinary attaches a binary: probe's file at start, with no
// process running it, and keeps it after its processes exit.
func TestTrackerPinsBinary(t *testing.T) {
	fake := &fakeAttacher{}
	fx := newTrackerFixtureWith(t, fake, 1, trackerOptions{}, false)
	fx.tracker.pinBinaries()
	if binaries, holders := fx.tracker.attachedCount(fx.key); binaries != 1 || holders != 0 {
		t.Fatalf("after start: %d binaries with %d holders, want 1 with 0", binaries, holders)
	}
	if want, _ := os.Stat(fx.bin); fake.files[0] == nil || !os.SameFile(fake.files[0], want) {
		t.Errorf("attached %s, not the file at %s", fake.paths[0], fx.bin)
	}
	fx.tracker.exec(fx.pids[0], process.FileID{}, "", 0)
	fx.tracker.exit(fx.pids[0])
	calls, attachments := fake.counts()
	// Detached binaries are closed by a goroutine of their own.
	fx.tracker.detacher.wait()
	if binaries, _ := fx.tracker.attachedCount(fx.key); calls != 1 || binaries != 1 || attachments[0].closed.Load() != 0 {
		t.Fatalf("%d attach calls, %d binaries after the process exited: want the pinned binary kept", calls, binaries)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestClassifyAttachErrors names attach errors and tells the ones no retry
// can cure.
func TestClassifyAttachErrors(t *testing.T) {
	for _, tc := range []struct {
		err       error
		reason    string
		permanent bool
	}{
		{fmt.Errorf("attaching: %w", unix.EINVAL), "EINVAL", true},
		{fmt.Errorf("attaching: %w", syscall.Errno(524)), "ENOTSUPP", true},
		{fmt.Errorf("attaching: %w", unix.EAGAIN), "EAGAIN", false},
		{fmt.Errorf("attaching: %w", unix.ENOMEM), "ENOMEM", false},
		{fmt.Errorf("attaching: %w", unix.ENOENT), "ENOENT", false},
		{errors.New("something else"), "error", false},
	} {
		reason, permanent := classify(tc.err)
		if reason != tc.reason || permanent != tc.permanent {
			t.Errorf("classify(%v) = %s, %v; want %s, %v", tc.err, reason, permanent, tc.reason, tc.permanent)
		}
	}
}

// newWatchedDirTracker returns a tracker whose one probe's file_match
// names a fresh directory, retaining up to maxBinaries of its files, with
// the workload binary to copy there and the fake it attaches with.
func newWatchedDirTracker(t *testing.T, maxBinaries int) (bin, dir string, fake *fakeAttacher, tr *tracker) {
	t.Helper()
	bin = testworkload.BuildC(t, "scopesleep.c", "-O2", "-g", "-pthread")
	dir = t.TempDir()
	fake = &fakeAttacher{}
	cfg := []ProbeConfig{{ID: "sleep", FileMatch: "^" + regexp.QuoteMeta(dir) + "/[^/]+$", Entry: "scoped_sleep", Exit: "return"}}
	opts := trackerOptions{retain: RetainConfig{MaxBinaries: maxBinaries, MaxAge: time.Hour}}
	tr, err := newTracker(zaptest.NewLogger(t), cfg, fake, negcache.NewFiles(negativeTTL, maxNegative), process.NewInfoCache(64), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.close)
	return bin, dir, fake, tr
}

// TestTrackerAttachesWrittenFiles hands the tracker the changes of a
// watched directory: a file written there is attached and retained with no
// process; a hard link to it is the same file; a file only created (still
// being written) waits for its close; a symlink planted there is never
// followed; a new version moved over a file replaces its attachment, also
// when it was attached under its temporary name; a file rewritten in place
// is attached afresh; and retain.max_binaries bounds the files kept.
func TestTrackerAttachesWrittenFiles(t *testing.T) {
	bin, dir, fake, tr := newWatchedDirTracker(t, 2)
	if got := tr.watchedDirs(); len(got) != 1 || got[0] != dir {
		t.Fatalf("watched directories %v, want %s", got, dir)
	}
	d, err := safefs.OpenNoLinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	written := func(name string, complete bool) {
		t.Helper()
		tr.written(dirwatch.Change{Dir: d, Name: name, Written: complete})
	}
	attached := func(name string) bool {
		t.Helper()
		return tr.isAttached(keyOf(t, filepath.Join(dir, name)))
	}

	copyFile(t, bin, filepath.Join(dir, "a"))
	written("a", true)
	if !attached("a") {
		t.Fatal("a file written into the watched directory is not attached")
	}
	if _, holders := tr.attachedCount(keyOf(t, filepath.Join(dir, "a"))); holders != 0 {
		t.Fatalf("%d holders of a file nothing runs", holders)
	}
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}
	written("hard", false)
	if calls, _ := fake.counts(); calls != 1 {
		t.Fatalf("%d attach calls after a hard link to an attached file, want 1", calls)
	}

	// Created, not closed yet: nothing until its writer closes it.
	f, err := os.OpenFile(filepath.Join(dir, "b"), os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	written("b", false)
	if attached("b") {
		t.Fatal("a file only created, maybe still being written, was attached")
	}
	f.Close()
	written("b", true)
	if !attached("b") {
		t.Fatal("a file closed after writing is not attached")
	}

	// A symlink to a matching file elsewhere is not followed.
	elsewhere := filepath.Join(t.TempDir(), "target")
	copyFile(t, bin, elsewhere)
	if err := os.Symlink(elsewhere, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	written("link", true)
	if tr.isAttached(keyOf(t, elsewhere)) {
		t.Fatal("a symlink in the watched directory was followed")
	}

	// A new version moved over a: attached, the old one detached.
	_, before := fake.counts()
	next := filepath.Join(dir, ".a.new")
	copyFile(t, bin, next)
	if err := os.Rename(next, filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	written("a", true)
	tr.detacher.wait()
	calls, after := fake.counts()
	// Detached binaries are closed by a goroutine of their own.
	tr.detacher.wait()
	if !attached("a") || calls != 3 || before[0].closed.Load() != 1 {
		t.Fatalf("a new version moved over a file: %d attach calls, old one closed %d times; want 3 and 1", calls, before[0].closed.Load())
	}

	// An installer's way: written under a temporary name (attached, as
	// it matches too), then moved over a: the same file, named a now, and
	// the version it replaced detached.
	calls, _ = fake.counts()
	tmp := filepath.Join(dir, ".a.tmp")
	copyFile(t, bin, tmp)
	written(".a.tmp", true)
	if err := os.Rename(tmp, filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	written("a", true)
	tr.detacher.wait()
	calls2, after2 := fake.counts()
	// Detached binaries are closed by a goroutine of their own.
	tr.detacher.wait()
	if calls2 != calls+1 || after[2].closed.Load() != 1 {
		t.Fatalf("a file moved over a from a temporary name: %d attach calls (want %d), replaced version closed %d times (want 1)", calls2, calls+1, after[2].closed.Load())
	}
	after = after2

	// Rewritten in place (same inode, new size): attached afresh.
	if err := os.WriteFile(filepath.Join(dir, "a"), append(content, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	written("a", true)
	calls, _ = fake.counts()
	// Detached binaries are closed by a goroutine of their own.
	tr.detacher.wait()
	if calls != 5 || after[3].closed.Load() != 1 {
		t.Fatalf("a file rewritten in place: %d attach calls, previous closed %d times; want 5 and 1", calls, after[3].closed.Load())
	}

	// Within retain.max_binaries (2): b, idle longest, was evicted when
	// .a.tmp came; a and c are kept.
	copyFile(t, bin, filepath.Join(dir, "c"))
	written("c", true)
	if !attached("c") || !attached("a") || attached("b") {
		t.Fatalf("after a third file with max_binaries 2: a %v, b %v, c %v; want b evicted", attached("a"), attached("b"), attached("c"))
	}
	// a, b, a's new version, .a.tmp, a rewritten, c.
	if got := tr.stats.attachedOnWrite.Load(); got != 6 {
		t.Errorf("%d files counted as attached on write, want 6", got)
	}
}

// TestTrackerAttachesNewVersionOfBinary watches the directory of a
// binary: probe's file: a new version moved over it is attached when
// moved, before it runs, and the old one detached.
func TestTrackerAttachesNewVersionOfBinary(t *testing.T) {
	built := testworkload.BuildC(t, "scopesleep.c", "-O2", "-g", "-pthread")
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	copyFile(t, built, bin)
	fake := &fakeAttacher{}
	cfg := []ProbeConfig{{ID: "sleep", Binary: bin, Entry: "scoped_sleep", Exit: "return"}}
	tr, err := newTracker(zaptest.NewLogger(t), cfg, fake, negcache.NewFiles(negativeTTL, maxNegative), process.NewInfoCache(64), trackerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	if got := tr.watchedDirs(); len(got) != 1 || got[0] != dir {
		t.Fatalf("watched directories %v, want %s", got, dir)
	}
	tr.pinBinaries()
	old := keyOf(t, bin)
	d, err := safefs.OpenNoLinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Unrelated files are not attached.
	copyFile(t, built, filepath.Join(dir, "other"))
	tr.written(dirwatch.Change{Dir: d, Name: "other", Written: true})
	next := filepath.Join(dir, ".app.new")
	copyFile(t, built, next)
	tr.written(dirwatch.Change{Dir: d, Name: ".app.new", Written: true})
	if err := os.Rename(next, bin); err != nil {
		t.Fatal(err)
	}
	tr.written(dirwatch.Change{Dir: d, Name: "app", Written: true})
	tr.detacher.wait()
	calls, attachments := fake.counts()
	// Detached binaries are closed by a goroutine of their own.
	tr.detacher.wait()
	if !tr.isAttached(keyOf(t, bin)) || tr.isAttached(old) || calls != 2 || attachments[0].closed.Load() != 1 {
		t.Fatalf("after a new version moved over the binary: new attached %v, old attached %v, %d attach calls (want 2)",
			tr.isAttached(keyOf(t, bin)), tr.isAttached(old), calls)
	}
	if got := tr.stats.attachedOnWrite.Load(); got != 1 {
		t.Errorf("%d files counted as attached on write, want 1", got)
	}
}

// TestPinBinariesSkipsNonFiles names a FIFO and a directory as binary:
// paths beside a real binary: the start neither blocks on the FIFO (no
// writer ever opens it) nor reads either of them, and the real binary is
// attached. Both were warned about at start (Config.logMissingBinaries).
func TestPinBinariesSkipsNonFiles(t *testing.T) {
	bin := testworkload.BuildC(t, "scopesleep.c", "-O2", "-g", "-pthread")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := []ProbeConfig{
		{ID: "fifo", Binary: fifo, Entry: "scoped_sleep", Exit: "return"},
		{ID: "dir", Binary: dir, Entry: "scoped_sleep", Exit: "return"},
		{ID: "real", Binary: bin, Entry: "scoped_sleep", Exit: "return"},
	}
	fake := &fakeAttacher{}
	tr, err := newTracker(zaptest.NewLogger(t), cfg, fake, negcache.NewFiles(negativeTTL, maxNegative), process.NewInfoCache(64), trackerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	done := make(chan struct{})
	go func() { tr.pinBinaries(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		// The blocked goroutine is left behind: the test failed.
		t.Fatal("pinBinaries blocked opening a FIFO named as binary:")
	}
	calls, _ := fake.counts()
	if evaluated := tr.stats.evaluations.Load(); calls != 1 || evaluated != 1 || !tr.isAttached(keyOf(t, bin)) {
		t.Errorf("%d attach calls, %d binaries evaluated, %s attached %v; want the real binary only",
			calls, evaluated, bin, tr.isAttached(keyOf(t, bin)))
	}
}

// TestTrackerCountsEvictions writes five copies of a binary into a watched
// directory with retain.max_binaries 2: the two written last stay
// attached, the three others are detached, and the three evictions are
// counted.
func TestTrackerCountsEvictions(t *testing.T) {
	bin, dir, fake, tr := newWatchedDirTracker(t, 2)
	d, err := safefs.OpenNoLinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	names := []string{"a", "b", "c", "d", "e"}
	for _, name := range names {
		copyFile(t, bin, filepath.Join(dir, name))
		tr.written(dirwatch.Change{Dir: d, Name: name, Written: true})
		// Idle since differs between files only by the clock's steps.
		time.Sleep(2 * time.Millisecond)
	}
	var kept []string
	for _, name := range names {
		if tr.isAttached(keyOf(t, filepath.Join(dir, name))) {
			kept = append(kept, name)
		}
	}
	tr.detacher.wait()
	_, attachments := fake.counts()
	closed := 0
	for _, a := range attachments {
		closed += int(a.closed.Load())
	}
	if len(kept) != 2 || kept[0] != "d" || kept[1] != "e" || closed != 3 {
		t.Errorf("attached %v with %d attachments closed, want [d e] and 3", kept, closed)
	}
	if got := tr.stats.evicted.Load(); got != 3 {
		t.Errorf("%d evictions counted, want 3", got)
	}
}
