package uproberecv

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/probesite"
	"github.com/bpfcol/bpfcol/internal/process"
)

const (
	// maxPlans bounds the plan cache: probes times binaries remembered.
	maxPlans = 4096
	// retryFirst and retryMax bound the backoff of a transient failure.
	retryFirst = time.Second
	retryMax   = 5 * time.Minute
)

// planKey is one probe in one file identity.
type planKey struct {
	dev, ino    uint64
	size, mtime int64
	probe       uint32
}

func planKeyOf(file process.FileID, probe uint32) planKey {
	return planKey{dev: file.Dev, ino: file.Ino, size: file.Size, mtime: file.ModTime.UnixNano(), probe: probe}
}

// planResult is what is known of one probe in one file: where its sites
// go, or why it cannot be attached there.
type planResult struct {
	// sites and notes are the plan; nil sites with err set when planning
	// failed.
	sites []scopeprobe.Site
	notes []string
	// err is why the probe is not attached: planning (no such function,
	// ambiguous name) or the kernel refusing the attach.
	err error
	// reason names err briefly (an errno name, or "plan"); permanent
	// failures are never retried for this file identity, others after
	// retryAt.
	reason    string
	permanent bool
	retryAt   time.Time
	failures  int
}

// planCache remembers plans and failures by file identity and probe, so
// neither the symbol lookup nor a refused attach is repeated for each
// process: results survive exec and exit. Bounded by count.
type planCache struct {
	entries *lru.Cache[planKey, *planResult]
	now     func() time.Time
	mu      sync.Mutex // guards the results' retry state
}

func newPlanCache(maxEntries int, now func() time.Time) *planCache {
	return &planCache{entries: lru.New[planKey, *planResult](int64(maxEntries), nil), now: now}
}

// permanentErrnos are attach errors no retry can cure for this file and
// probe: the kernel refused the site itself.
var permanentErrnos = []syscall.Errno{unix.EINVAL, unix.EOPNOTSUPP, unix.E2BIG, unix.ENOEXEC, unix.EFAULT, unix.ERANGE, 524 /* ENOTSUPP */}

// classify names an attach error and says whether it is permanent.
func classify(err error) (reason string, permanent bool) {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return "error", false
	}
	name := unix.ErrnoName(errno)
	switch {
	case errno == 524:
		// The kernel's internal ENOTSUPP: an instruction uprobes cannot
		// handle.
		name = "ENOTSUPP"
	case name == "":
		name = "errno " + strconv.Itoa(int(errno))
	}
	return name, slices.Contains(permanentErrnos, errno)
}

// recordAttachFailure notes that the kernel refused r's sites with err;
// it returns whether this is news worth a log line (first failure, or
// another reason).
func (c *planCache) recordAttachFailure(r *planResult, err error) bool {
	reason, permanent := classify(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	news := r.err == nil || r.reason != reason
	r.err, r.reason, r.permanent = err, reason, permanent
	r.failures++
	backoff := retryFirst << min(r.failures-1, 20)
	r.retryAt = c.now().Add(min(backoff, retryMax))
	return news
}

func (c *planCache) recordAttached(r *planResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.err, r.reason, r.permanent, r.failures = nil, "", false, 0
}

// usable tells what to do with a cached result: attach its sites (ready),
// skip it (known failure), or skip it for now (waiting for its retry).
func (c *planCache) usable(r *planResult) (ready, permanent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r.err == nil:
		return true, false
	case r.permanent:
		return false, true
	case r.sites != nil && !c.now().Before(r.retryAt):
		return true, false
	}
	return false, false
}

// evaluate finds the probes' sites in the binary tg (through the plan
// cache, reading the binary only for probes not planned before for its
// identity) and attaches them. It touches no tracker state but its stats
// and the caches, so it runs without the lock. It returns the attachments,
// and whether that verdict is conclusive: from reading the binary or
// permanent failures, not from a failure to open it or a transient one.
// callAt is set to when the attach call began (ktime).
func (t *tracker) evaluate(pid int, tg *target, probes []*compiledProbe, callAt *int64) (_ []attachment, conclusive bool) {
	conclusive = true
	cacheable := identified(tg.file)
	type planned struct {
		probe *compiledProbe
		res   *planResult
	}
	var ready []planned
	var toPlan []*compiledProbe
	for _, p := range probes {
		if !cacheable {
			toPlan = append(toPlan, p)
			continue
		}
		r, ok := t.plans.entries.Get(planKeyOf(tg.file, p.id))
		if !ok {
			toPlan = append(toPlan, p)
			continue
		}
		switch ok, permanent := t.plans.usable(r); {
		case ok:
			ready = append(ready, planned{p, r})
		case permanent:
			t.stats.knownFailures.Add(1)
		default:
			t.stats.knownFailures.Add(1)
			conclusive = false
		}
	}
	if len(toPlan) > 0 {
		results, logPlacements, ok := t.plan(pid, tg, toPlan)
		if !ok {
			return nil, false
		}
		// Logged once the uprobes are in: the calls made until then are
		// missed.
		defer logPlacements()
		for i, p := range toPlan {
			r := results[i]
			if cacheable {
				t.plans.entries.Add(planKeyOf(tg.file, p.id), r)
			}
			if r.err == nil {
				ready = append(ready, planned{p, r})
			}
		}
	}
	if len(ready) == 0 {
		return nil, conclusive
	}
	var sites []scopeprobe.Site
	for _, pl := range ready {
		sites = append(sites, pl.res.sites...)
	}
	attachPath, done, err := t.attachPathOf(tg)
	if err != nil {
		t.logger.Debug("opening binary to attach", zap.String("path", tg.path), zap.Int("pid", pid), zap.Error(err))
		return nil, false
	}
	defer done()
	attachStart := time.Now()
	*callAt = ktime.MonotonicNanos()
	a, err := t.attacher.Attach(attachPath, sites)
	t.attachCalls.record(attachCallKey, time.Since(attachStart))
	if err == nil {
		ids := make([]string, len(ready))
		for i, pl := range ready {
			ids[i] = pl.probe.cfg.ID
			t.plans.recordAttached(pl.res)
		}
		t.logger.Info("attached uprobes", zap.String("path", tg.path), zap.Strings("probes", ids),
			zap.Int("uprobes", a.Links()), zap.Int("pid", pid), zap.Duration("attach_time", time.Since(attachStart)))
		return []attachment{a}, conclusive
	}
	if len(ready) == 1 {
		t.attachFailed(tg, ready[0].probe, ready[0].res, err)
		_, permanent := classify(err)
		return nil, conclusive && permanent
	}
	// Several probes: attach each alone, so that one refused site costs
	// only its own probe.
	var as []attachment
	for _, pl := range ready {
		a, err := t.attacher.Attach(attachPath, pl.res.sites)
		if err != nil {
			t.attachFailed(tg, pl.probe, pl.res, err)
			if _, permanent := classify(err); !permanent {
				conclusive = false
			}
			continue
		}
		t.plans.recordAttached(pl.res)
		t.logger.Info("attached uprobes", zap.String("path", tg.path), zap.Strings("probes", []string{pl.probe.cfg.ID}),
			zap.Int("uprobes", a.Links()), zap.Int("pid", pid))
		as = append(as, a)
	}
	return as, conclusive
}

// attachPathOf opens the binary and returns a path naming it for the
// kernel as long as done is not called: the open descriptor's. A mapping's
// /proc/PID/map_files entry can vanish while ld.so remaps segments, and
// the process's root with the process; the descriptor stays. Its identity
// is checked when known.
func (t *tracker) attachPathOf(tg *target) (path string, done func(), err error) {
	f, err := tg.open()
	if err != nil {
		return "", nil, err
	}
	if identified(tg.file) {
		id, err := process.StatFile(f)
		if err != nil || !id.Same(tg.file) {
			f.Close()
			return "", nil, fmt.Errorf("opening %s to attach: not the file evaluated", tg.path)
		}
	}
	return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())), func() { f.Close() }, nil
}

// attachFailed records and logs the kernel refusing probe p's sites in
// tg: once per file identity, probe and reason.
func (t *tracker) attachFailed(tg *target, p *compiledProbe, r *planResult, err error) {
	if !t.plans.recordAttachFailure(r, err) {
		t.logger.Debug("attaching uprobes failed again", zap.String("path", tg.path), zap.String("probe", p.cfg.ID), zap.Error(err))
		return
	}
	t.plans.mu.Lock()
	permanent, retryAt := r.permanent, r.retryAt
	t.plans.mu.Unlock()
	fields := []zap.Field{zap.String("path", tg.path), zap.String("probe", p.cfg.ID), zap.String("reason", r.reason), zap.Error(err)}
	if permanent {
		t.logger.Warn("the kernel refused the probe's uprobes: not retried for this file", fields...)
		return
	}
	t.logger.Warn("attaching uprobes failed: retried later", append(fields, zap.Time("retry_at", retryAt))...)
}

// plan opens the binary and plans each probe. ok is false when the binary
// could not be opened. logPlacements logs where each probe was placed.
func (t *tracker) plan(pid int, tg *target, probes []*compiledProbe) (_ []*planResult, logPlacements func(), ok bool) {
	var placements [][]zap.Field
	logPlacements = func() {
		for _, fields := range placements {
			t.logger.Info("probe placement", fields...)
		}
	}
	f, err := tg.open()
	if err != nil {
		t.logger.Debug("opening binary", zap.String("path", tg.path), zap.Int("pid", pid), zap.Error(err))
		return nil, logPlacements, false
	}
	t.stats.evaluations.Add(1)
	results := make([]*planResult, len(probes))
	var bin *probesite.Binary
	if fault := elfbin.Guard("reading "+tg.path, func() { bin, err = probesite.Open(f, t.tables) }); fault != nil {
		f.Close()
		t.logger.Info("binary not read", zap.String("path", tg.path), zap.Error(fault))
		return nil, logPlacements, false
	}
	if err != nil {
		t.logger.Info("binary has nothing to instrument: not ELF", zap.String("path", tg.path), zap.Error(err))
		for i := range results {
			results[i] = &planResult{err: err, reason: "not ELF", permanent: true}
		}
		return results, logPlacements, true
	}
	defer bin.Close()
	for i, p := range probes {
		var plan probesite.Plan
		var fault error
		cpu := threadCPU(func() {
			fault = elfbin.Guard("placing "+p.cfg.ID+" in "+tg.path, func() { plan, err = bin.PlanProbe(p.id, p.cfg.Entry, p.cfg.exit()) })
		})
		t.stats.lookupCPUNanos.Add(int64(cpu))
		if fault != nil {
			// Its identity changed with its size: nothing is kept for it.
			t.logger.Info("binary not read", zap.String("path", tg.path), zap.Error(fault))
			return nil, logPlacements, false
		}
		if err != nil {
			// Once per file identity and probe: the result is cached.
			level := t.logger.Warn
			if errors.Is(err, probesite.ErrNoSymbol) {
				level = t.logger.Info
			}
			level("probe has nothing to attach to in binary",
				zap.String("probe", p.cfg.ID), zap.String("path", tg.path), zap.Error(err))
			results[i] = &planResult{err: err, reason: "plan", permanent: true}
			continue
		}
		results[i] = &planResult{sites: plan.Sites, notes: plan.Notes}
		placements = append(placements, []zap.Field{zap.String("probe", p.cfg.ID), zap.String("path", tg.path),
			zap.Strings("choices", plan.Notes), zap.Bool("go", bin.IsGo()), zap.Duration("lookup_cpu", cpu)})
	}
	return results, logPlacements, true
}

// threadCPU runs fn on one OS thread and returns the CPU time that thread
// spent in it.
func threadCPU(fn func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadCPUNow()
	fn()
	return threadCPUNow() - before
}

// latencies keeps the recent attach latencies of each trigger, for the
// metric and for percentiles in the shutdown summary and tests.
type latencies struct {
	mu      sync.Mutex
	samples map[string][]time.Duration // ring of the latest maxLatencySamples
	next    map[string]int
	total   map[string]int64
	// onRecord, when set, publishes each sample (the histogram metric).
	onRecord func(trigger string, d time.Duration)
}

const maxLatencySamples = 4096

// Keys of tracker.attachCalls: the attach calls' durations, and the time
// from an exec or mapping to its attach call (the event's notice, the
// lookup, and waiting behind other events).
const (
	attachCallKey = "attach_call"
	beforeCallKey = "before_call"
)

func newLatencies() *latencies {
	return &latencies{samples: map[string][]time.Duration{}, next: map[string]int{}, total: map[string]int64{}}
}

func (l *latencies) record(trigger string, d time.Duration) {
	l.mu.Lock()
	s := l.samples[trigger]
	if len(s) < maxLatencySamples {
		l.samples[trigger] = append(s, d)
	} else {
		s[l.next[trigger]] = d
		l.next[trigger] = (l.next[trigger] + 1) % maxLatencySamples
	}
	l.total[trigger]++
	publish := l.onRecord
	l.mu.Unlock()
	if publish != nil {
		publish(trigger, d)
	}
}

// percentiles returns the count of samples and the p50 and p99 of the
// recent ones of trigger.
func (l *latencies) percentiles(trigger string) (n int64, p50, p99 time.Duration) {
	l.mu.Lock()
	s := slices.Clone(l.samples[trigger])
	n = l.total[trigger]
	l.mu.Unlock()
	if len(s) == 0 {
		return n, 0, 0
	}
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return n, at(0.50), at(0.99)
}
