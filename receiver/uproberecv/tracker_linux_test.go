package uproberecv

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/bpfcol/bpfcol/internal/bpf/procwatch"
	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// fakeAttacher stands in for the scope probes: attaching needs BPF, and a
// failed or slow attach cannot be produced on demand with the real one.
type fakeAttacher struct {
	// gate, when set, holds every Attach until it is closed; entered gets
	// a value when an Attach starts waiting on it.
	gate    chan struct{}
	entered chan struct{}

	mu          sync.Mutex
	fail        error
	calls       int
	paths       []string
	sites       [][]scopeprobe.Site
	attachments []*fakeAttachment
}

type fakeAttachment struct {
	sites  int
	closed atomic.Int32
}

func (a *fakeAttachment) Links() int   { return a.sites }
func (a *fakeAttachment) Close() error { a.closed.Add(1); return nil }

func (f *fakeAttacher) Attach(path string, sites []scopeprobe.Site) (attachment, error) {
	f.mu.Lock()
	f.calls++
	f.paths = append(f.paths, path)
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
	a := &fakeAttachment{sites: len(sites)}
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

// trackerFixture is a tracker on a real binary, and processes of it that
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
	tr, err := newTracker(zaptest.NewLogger(t), cfg, fake, negcache.NewFiles(negativeTTL, maxNegative), newProcessInfos())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.close)
	fx := &trackerFixture{bin: bin, key: f.FileKey, tracker: tr, fake: fake}
	never := filepath.Join(t.TempDir(), "never")
	for range processes {
		cmd := testworkload.Start(t, bin, never, os.DevNull, "1")
		fx.pids = append(fx.pids, cmd.Process.Pid)
	}
	return fx
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
		fx.tracker.exec(pid, procwatch.ExeFile{})
	}
	calls, attachments := fake.counts()
	if calls != 1 || len(attachments) != 1 {
		t.Fatalf("%d attach calls for one binary run by 3 processes, want 1", calls)
	}
	if sites := fake.sites[0]; len(sites) < 2 || sites[0].ProbeID != 0 {
		t.Errorf("attached sites %+v, want an entry and exits of probe 0", sites)
	}
	attached, err := os.Stat(fake.paths[0])
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.Stat(fx.bin)
	if !os.SameFile(attached, want) {
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
	if n := attachments[0].closed.Load(); n != 0 {
		t.Fatalf("detached %d times while a process still runs the binary", n)
	}
	fx.tracker.exit(fx.pids[2])
	if binaries, _ := fx.tracker.attachedCount(fx.key); binaries != 0 {
		t.Fatalf("%d binaries attached after the last exit, want 0", binaries)
	}
	if n := attachments[0].closed.Load(); n != 1 {
		t.Fatalf("detached %d times after the last exit, want 1", n)
	}
	if got := fx.tracker.stats.detached.Load(); got != 1 {
		t.Errorf("detached stat %d, want 1", got)
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
			fx.tracker.exec(pid, procwatch.ExeFile{})
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
	go func() { fx.tracker.exec(pid, procwatch.ExeFile{}); close(done) }()
	<-fake.entered
	within(t, "the exit", func() { fx.tracker.exit(pid) })
	close(fake.gate)
	<-done
	_, attachments := fake.counts()
	if len(attachments) != 1 || attachments[0].closed.Load() != 1 {
		t.Fatalf("attachment of a process that exited meanwhile not detached once: %d attachments", len(attachments))
	}
	if binaries, holders := fx.tracker.attachedCount(fx.key); binaries != 0 || holders != 0 {
		t.Fatalf("%d binaries with %d holders after the exit, want none", binaries, holders)
	}
}

// TestTrackerFailedAttach checks that a failed attach attaches nothing and
// is not remembered as "nothing to instrument": the next process of the
// binary tries again.
func TestTrackerFailedAttach(t *testing.T) {
	fake := &fakeAttacher{fail: errors.New("attach refused")}
	fx := newTrackerFixture(t, fake, 3)
	fx.tracker.exec(fx.pids[0], procwatch.ExeFile{})
	if binaries, _ := fx.tracker.attachedCount(fx.key); binaries != 0 {
		t.Fatalf("%d binaries attached after a failed attach, want 0", binaries)
	}
	fx.tracker.exec(fx.pids[1], procwatch.ExeFile{})
	if calls, _ := fake.counts(); calls != 2 {
		t.Fatalf("%d attach calls for two processes after a failure, want 2 (no negative caching)", calls)
	}
	if got := fx.tracker.stats.negativeHits.Load(); got != 0 {
		t.Errorf("%d negative cache hits after a failed attach, want 0", got)
	}
	fake.mu.Lock()
	fake.fail = nil
	fake.mu.Unlock()
	fx.tracker.exec(fx.pids[2], procwatch.ExeFile{})
	if binaries, holders := fx.tracker.attachedCount(fx.key); binaries != 1 || holders != 1 {
		t.Fatalf("%d binaries with %d holders once attaching works, want 1 with 1", binaries, holders)
	}
}
