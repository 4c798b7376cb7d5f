package uproberecv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/procwatch"
	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
	"github.com/bpfcol/bpfcol/internal/bpf/support"
	"github.com/bpfcol/bpfcol/internal/dirwatch"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

const (
	// pollInterval bounds how long a record waits in the ringbuf: records
	// wake the reader only in bulk (wakeupBytes), so it also reads on a timer.
	pollInterval = 50 * time.Millisecond
	// clockRefreshInterval is how often the ktime to Unix offset is
	// measured, and retained binaries and exited processes swept.
	clockRefreshInterval = 10 * time.Second
	// maxProcessInfos bounds the per-process resource cache.
	maxProcessInfos = 8192
	// ringBufferBytes holds about 50k records: a quarter second at the
	// throughput goal, enough to ride out a slow consumer.
	ringBufferBytes = 4 << 20
	// wakeupBytes is the ringbuf fill at which a record wakes the reader
	// before its poll: an eighth leaves room for a poll interval at the
	// throughput goal.
	wakeupBytes = ringBufferBytes / 8
	// warmPeriod is how often the warmer registers a uprobe or
	// unregisters the previous one: the kernel stays in its fast mode about
	// a grace period after the last writer. Measured on quiet attaches: 8
	// ms left none slow of 60, 16 ms one, 24 ms a tenth; at load 12, 8 ms
	// none of 15, 10-12 ms a fifth.
	warmPeriod = 8 * time.Millisecond
	// warmClosers bounds the warmer's unregistrations waiting in the
	// kernel (40-200 ms each, one every other warmPeriod).
	warmClosers = 32
)

// options are knobs tests and benchmarks turn; users do not.
type options struct {
	// noNegativeCache evaluates every binary afresh, to measure the cache.
	noNegativeCache bool
	// loadFiller loads the record filler program, for benchmarks.
	loadFiller bool
	// warmAttach turns the warmer on whatever the config says, for the
	// benchmarks that measure it.
	warmAttach bool
}

// logsReceiver turns scope records into log records.
type logsReceiver struct {
	set     receiver.Settings
	cfg     *Config
	opts    options
	next    consumer.Logs
	obsrecv *receiverhelper.ObsReport

	probes *scopeprobe.Probes
	// warmer is nil unless warm_attach is on, a file_match probe exists
	// and the kernel has uprobe_multi.
	warmer *scopeprobe.Warmer
	scopes *scopes.Map // the shared map of open scopes, when a sampler reads it
	// unregisterProbes frees the probe names registered with scopes.
	unregisterProbes func()
	// undeclare withdraws the receiver's scopes.Writer role.
	undeclare func()
	watcher   *procwatch.Watcher
	// dirs watches the directories anchored file_match regexes name, to
	// attach files written there before anything runs them; nil when none.
	dirs    *dirwatch.Watcher
	tracker *tracker
	clock   *ktime.Clock
	infos   *process.InfoCache

	wg        sync.WaitGroup
	stop      chan struct{}
	telemetry *metadata.TelemetryBuilder

	// Counts since start, logged at shutdown.
	read        atomic.Int64
	exported    atomic.Int64
	requests    atomic.Int64
	refused     atomic.Int64
	eventsRead  atomic.Int64
	firstRecord atomic.Bool
	startedAt   time.Time
}

func newLogsReceiver(set receiver.Settings, cfg *Config, next consumer.Logs) (*logsReceiver, error) {
	obsrecv, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID:             set.ID,
		Transport:              "bpf",
		ReceiverCreateSettings: set,
	})
	if err != nil {
		return nil, fmt.Errorf("creating obsreport: %w", err)
	}
	// Declared at creation: the collector creates every component before
	// it starts any, so an ebpfprof receiver starting first knows of this one.
	return &logsReceiver{set: set, cfg: cfg, next: next, obsrecv: obsrecv, undeclare: scopes.Declare(scopes.Writer)}, nil
}

// Start loads the scope probes and the process watcher, scans /proc and
// attaches to every matching binary. It fails with the name of whatever is
// missing: a capability, BTF or a kernel feature; under error_mode ignore it
// logs that and leaves the receiver inactive.
func (r *logsReceiver) Start(ctx context.Context, host component.Host) error {
	return r.cfg.ErrorMode.OnStartError(r.set.Logger, r.start(ctx, host))
}

func (r *logsReceiver) start(_ context.Context, _ component.Host) (err error) {
	r.startedAt = time.Now()
	// The probes and the process watcher share one parse of the kernel's
	// BTF, dropped once both are loaded.
	defer support.ReleaseKernelTypes()
	if len(r.cfg.Probes) == 0 {
		r.set.Logger.Warn("uprobe receiver has no probes: nothing to do")
		return nil
	}
	// Where probes go is read from x86-64 or arm64 code.
	if err := support.Check(support.Architecture("probe placement (decoding machine code)", "amd64", "arm64")); err != nil {
		return fmt.Errorf("starting uprobe receiver: %w", err)
	}
	r.cfg.logMissingBinaries(r.set.Logger)
	r.cfg.logLinkedDirs(r.set.Logger)
	defer func() {
		if err != nil {
			r.closeAll()
		}
	}()
	settings := make([]scopeprobe.Setting, len(r.cfg.Probes))
	ids := make([]string, len(r.cfg.Probes))
	for i, p := range r.cfg.Probes {
		ids[i] = p.ID
		settings[i] = scopeprobe.Setting{MinDuration: p.MinDuration, MainThreadOnly: p.MainThreadOnly}
		for _, pid := range p.PIDs {
			settings[i].PIDs = append(settings[i].PIDs, uint32(pid))
		}
	}
	// Scopes are written where the sampler can link samples to them only
	// when an ebpfprof receiver runs in this collector.
	var shared *ebpf.Map
	var base uint32
	if scopes.Declared(scopes.Reader) {
		// What the probes need is checked first: without CAP_BPF the
		// shared map's creation fails too, with EPERM naming nothing.
		if err := scopeprobe.CheckSupport(); err != nil {
			return fmt.Errorf("starting uprobe receiver: %w", err)
		}
		if r.scopes, err = scopes.Acquire(); err != nil {
			return fmt.Errorf("starting uprobe receiver: %w", err)
		}
		shared = r.scopes.Map()
		base, r.unregisterProbes = scopes.RegisterProbes(ids)
	}
	r.probes, err = scopeprobe.New(scopeprobe.Options{
		Settings:        settings,
		RingBufferBytes: ringBufferBytes,
		WakeupBytes:     wakeupBytes,
		LoadFiller:      r.opts.loadFiller,
		Scopes:          shared,
		ScopeProbeBase:  base,
		// Only attaches after start wait for the kernel; binary: probes
		// attach at start.
		ExpediteAttach: r.cfg.ExpediteAttach && r.anyFileMatch(),
	})
	if err != nil {
		return fmt.Errorf("starting uprobe receiver: %w", err)
	}
	for i, p := range r.cfg.Probes {
		// A binary: probe loads its programs attaching at start; a
		// file_match one would on the first exec of its binary, which
		// then runs unprobed meanwhile. Prepared for native code: its
		// exit: return is a uretprobe.
		if p.FileMatch != "" {
			if err := r.probes.Prepare(uint32(i), false, p.exit() == exitReturn); err != nil {
				return fmt.Errorf("starting uprobe receiver: %w", err)
			}
		}
	}
	if (r.cfg.WarmAttach || r.opts.warmAttach) && r.anyFileMatch() {
		// A binary found by file_match is attached after its exec: keep
		// that attach from waiting for an RCU grace period in the kernel.
		if r.warmer, err = r.probes.StartWarmer(warmPeriod, warmClosers); err != nil {
			r.set.Logger.Info("uprobe attach after exec may wait for an RCU grace period (4-25 ms)", zap.Error(err))
			r.warmer, err = nil, nil
		}
	}
	r.clock = ktime.New()
	r.infos = process.NewInfoCache(maxProcessInfos)
	var negative *negcache.Files
	if !r.opts.noNegativeCache {
		negative = negcache.NewFiles(negativeTTL, maxNegative)
	}
	// Watch before scanning, so a process started during the scan is not
	// missed; one seen twice is harmless. Mappings are watched only for
	// file_match probes: a binary: probe is attached by path from the
	// start, and covers libraries loaded late by itself.
	watchOpts := procwatch.Options{NoMappings: !r.anyFileMatch()}
	if r.watcher, err = procwatch.New(watchOpts); err != nil {
		return fmt.Errorf("starting uprobe receiver: %w", err)
	}
	if err := r.watcher.MappingsError(); err != nil && !watchOpts.NoMappings {
		r.set.Logger.Warn("late libraries are noticed through a weaker hook",
			zap.String("mappings", mappingsName(r.watcher.Mappings())), zap.Error(err))
	}
	r.tracker, err = newTracker(r.set.Logger, r.cfg.Probes, probesAttacher{r.probes}, negative, r.infos, trackerOptions{
		retain:        r.cfg.Retain,
		mappingEvents: r.watcher.Mappings() != procwatch.MappingsNone,
		// Records read late (0.7 s after their process exited on
		// one emulated CPU) still find its Info.
		infoLinger: max(describeWait+time.Second, 2*r.cfg.batch().Timeout+pollInterval),
	})
	if err != nil {
		return fmt.Errorf("starting uprobe receiver: %w", err)
	}
	if err := r.registerTelemetry(); err != nil {
		r.set.Logger.Warn("self-metrics unavailable", zap.Error(err))
	}
	r.stop = make(chan struct{})
	builder := newLogBuilder(metadata.ScopeName, r.set.BuildInfo.Version, ids, r.clock, r.infos)
	r.wg.Add(3)
	go r.drainRecords(builder)
	go r.watchProcesses()
	go r.refreshClock()
	r.tracker.pinBinaries()
	// Watched before the files on disk are listed, so that one written
	// meanwhile is not missed; one seen twice is harmless.
	r.watchDirs()
	r.tracker.preattachCandidates()
	if err := r.tracker.scanAll(); err != nil {
		return fmt.Errorf("starting uprobe receiver: %w", err)
	}
	r.set.Logger.Info("uprobe receiver started",
		zap.Strings("probes", ids),
		zap.String("mappings", mappingsName(r.watcher.Mappings())),
		zap.Int64("binaries_attached", r.tracker.stats.attached.Load()),
		zap.Strings("watched_dirs", r.watchedDirNames()),
		zap.Int64("processes_scanned", r.tracker.stats.scans.Load()),
		zap.Duration("clock_offset_uncertainty", r.clock.Uncertainty()),
		zap.Duration("start_duration", time.Since(r.startedAt)))
	return nil
}

// watchProcesses feeds exec and exit events to the tracker.
func (r *logsReceiver) watchProcesses() {
	defer r.wg.Done()
	var ev procwatch.Event
	for {
		if err := r.watcher.Read(&ev); err != nil {
			if !errors.Is(err, procwatch.ErrClosed) {
				r.set.Logger.Error("reading process events stopped", zap.Error(err))
			}
			return
		}
		r.eventsRead.Add(1)
		switch ev.Kind {
		case procwatch.Exec:
			r.tracker.exec(int(ev.PID), ev.File, r.tracker.absoluteExecPath(int(ev.PID), int(ev.ParentPID), ev.Path, ev.File), ev.KTime)
		case procwatch.Exit:
			r.tracker.exit(int(ev.PID))
		case procwatch.MapExec:
			// execve's own mappings are the Exec event's to scan.
			if !ev.InExecve {
				r.tracker.mapped(int(ev.PID), ev.File, ev.Path, ev.KTime)
			}
		}
	}
}

// watchDirs starts watching the directories anchored file_match regexes
// name. A directory that cannot be watched is logged and left to the exec
// path, as are all of them when inotify is not available.
func (r *logsReceiver) watchDirs() {
	dirs := r.tracker.watchedDirs()
	if len(dirs) == 0 {
		return
	}
	if len(dirs) > maxWatchedDirs {
		r.set.Logger.Warn("too many directories named by file_match: the others' files are attached when they run",
			zap.Int("watched", maxWatchedDirs), zap.Strings("not_watched", dirs[maxWatchedDirs:]))
		dirs = dirs[:maxWatchedDirs]
	}
	w, skipped, err := dirwatch.New(dirs, dirwatch.Options{MaxDirs: maxWatchedDirs, MaxPending: maxWatchPending})
	if err != nil {
		r.set.Logger.Warn("files written into file_match directories are attached when they run, not before", zap.Error(err))
		return
	}
	for _, err := range skipped {
		r.set.Logger.Info("directory not watched: its files are attached when they run", zap.Error(err))
	}
	if len(w.Dirs()) == 0 {
		w.Close()
		return
	}
	r.dirs = w
	r.wg.Add(1)
	go r.attachWritten()
}

// attachWritten attaches the files written into watched directories as
// they come. Lost events are logged once and counted: such files are
// attached at their exec or mapping, as if not watched.
func (r *logsReceiver) attachWritten() {
	defer r.wg.Done()
	warned := false
	for {
		c, err := r.dirs.Next()
		if err != nil {
			if !errors.Is(err, dirwatch.ErrClosed) {
				r.set.Logger.Error("watching directories stopped: files are attached when they run", zap.Error(err))
			}
			return
		}
		if c.Lost {
			if !warned {
				warned = true
				st := r.dirs.Stats()
				r.set.Logger.Warn("files written into watched directories were missed: they are attached when they run",
					zap.Uint64("queue_overflows", st.Overflows), zap.Uint64("dropped", st.Dropped))
			}
			continue
		}
		r.tracker.written(c)
	}
}

// refreshClock re-measures the ktime offset periodically.
func (r *logsReceiver) refreshClock() {
	defer r.wg.Done()
	ticker := time.NewTicker(clockRefreshInterval)
	defer ticker.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-ticker.C:
			r.clock.Refresh()
			r.tracker.sweep()
		}
	}
}

// drainRecords reads records into batches, handing a batch on as one
// request when it holds batch.max_records or its first record waited
// batch.timeout. Between batches it polls every pollInterval for records
// that did not wake it. A slow consumer holds the loop: records wait in
// the ringbuf meanwhile (drops counted) and the next request carries them.
func (r *logsReceiver) drainRecords(b *logBuilder) {
	defer r.wg.Done()
	var rec scopeprobe.Record
	r.probes.SetDeadline(time.Now().Add(pollInterval))
	for {
		err := r.probes.Read(&rec)
		switch {
		case err == nil:
			if r.firstRecord.CompareAndSwap(false, true) {
				r.set.Logger.Info("first scope record received", zap.Duration("since_start", time.Since(r.startedAt)))
			}
			r.read.Add(1)
			if b.records == 0 {
				r.probes.SetDeadline(time.Now().Add(r.cfg.batch().Timeout))
			}
			b.add(&rec, pcommon.NewTimestampFromTime(time.Now()))
			if b.records >= r.cfg.batch().MaxRecords {
				r.flush(b, false)
			}
		case errors.Is(err, scopeprobe.ErrDeadline):
			r.flush(b, false)
		case errors.Is(err, scopeprobe.ErrFlushed):
			// Shutdown detached every uprobe and flushed: all records read.
			r.flush(b, true)
			return
		case errors.Is(err, scopeprobe.ErrClosed):
			r.flush(b, true)
			return
		default:
			r.set.Logger.Error("reading scope records stopped", zap.Error(err))
			r.flush(b, true)
			return
		}
	}
}

func (r *logsReceiver) flush(b *logBuilder, last bool) {
	r.probes.SetDeadline(time.Now().Add(pollInterval))
	if b.records == 0 {
		return
	}
	logs, n := b.take(time.Now(), last)
	if n == 0 {
		return
	}
	r.requests.Add(1)
	ctx := r.obsrecv.StartLogsOp(context.Background())
	err := r.next.ConsumeLogs(ctx, logs)
	r.obsrecv.EndLogsOp(ctx, "scope", n, err)
	if err != nil {
		r.refused.Add(int64(n))
		return
	}
	r.exported.Add(int64(n))
}

// Shutdown detaches every uprobe, hands on the records already in the
// ringbuf, and frees every kernel object. It is safe to call without Start.
func (r *logsReceiver) Shutdown(ctx context.Context) error {
	r.undeclare()
	if r.probes == nil {
		return nil
	}
	if r.telemetry != nil {
		r.telemetry.Shutdown()
	}
	var errs []error
	if r.watcher != nil {
		errs = append(errs, r.watcher.Close())
	}
	var dirs dirwatch.Stats
	if r.dirs != nil {
		errs = append(errs, r.dirs.Close())
		dirs = r.dirs.Stats()
	}
	r.tracker.close()
	close(r.stop)
	// No uprobe fires any more: read what is left, then stop.
	errs = append(errs, r.probes.Flush())
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("waiting for the uprobe receiver to stop: %w", ctx.Err()))
	}
	var warm scopeprobe.WarmerStats
	if r.warmer != nil {
		errs = append(errs, r.warmer.Close())
		warm = r.warmer.Stats()
	}
	counters, _ := r.probes.Counters()
	expedite := r.probes.ExpediteStats()
	errs = append(errs, r.probes.Close())
	st := &r.tracker.stats
	r.set.Logger.Info("uprobe receiver stopped",
		zap.Int64("records_read", r.read.Load()),
		zap.Int64("records_exported", r.exported.Load()),
		zap.Int64("export_requests", r.requests.Load()),
		zap.Int64("records_refused", r.refused.Load()),
		zap.Uint64("records_lost_ringbuf", counters.LostRingbuf),
		zap.Uint64("exits_without_entry", counters.ExitWithoutEntry),
		zap.Uint64("scopes_shorter_than_min", counters.Short),
		zap.Uint64("scopes_not_stored", counters.ScopeFull),
		zap.Uint64("scopes_return_unprobed", counters.ReturnUnprobed),
		zap.Uint64("entries_filtered", counters.Filtered),
		zap.Int64("process_events", r.eventsRead.Load()),
		zap.Int64("processes_scanned", st.scans.Load()),
		zap.Int64("binaries_evaluated", st.evaluations.Load()),
		zap.Int64("binaries_evicted", st.evicted.Load()),
		zap.Int64("negative_cache_hits", st.negativeHits.Load()),
		zap.Int64("execs_answered_from_event", st.quietExecs.Load()),
		zap.Int64("known_failures_skipped", st.knownFailures.Load()),
		zap.Int64("processes_exited_before_attach", st.exitedBeforeAttach.Load()),
		zap.Int64("files_attached_on_write", st.attachedOnWrite.Load()),
		zap.Int64("mappings_unnamed", st.mappingsUnnamed.Load()),
		zap.Int64("exec_paths_unresolved", st.execPathsUnresolved.Load()),
		zap.Uint64("watched_dir_queue_overflows", dirs.Overflows),
		zap.Uint64("watched_dir_files_dropped", dirs.Dropped),
		zap.Duration("symbol_lookup_cpu", time.Duration(st.lookupCPUNanos.Load())),
		latencyField(r.tracker.latency, triggerExec),
		latencyField(r.tracker.latency, triggerMapping),
		zap.Uint64("uprobe_warmer_writes", warm.Writes),
		zap.Uint64("uprobe_warmer_skipped", warm.Skipped),
		zap.Uint64("uprobe_warmer_errors", warm.Errors),
		zap.Uint64("rcu_expedited_raised", expedite.Raised),
		zap.Uint64("rcu_expedited_already_set", expedite.AlreadySet),
		zap.Uint64("rcu_expedited_errors", expedite.Errors),
		zap.Duration("rcu_expedited_set_for", expedite.SetFor),
		zap.Duration("clock_offset_uncertainty", r.clock.Uncertainty()),
		zap.Duration("clock_offset_max_step", r.clock.MaxStep()))
	r.probes = nil
	errs = append(errs, r.releaseScopes())
	return errors.Join(errs...)
}

// releaseScopes drops the receiver's reference to the shared map of open
// scopes, if it took one.
func (r *logsReceiver) releaseScopes() error {
	if r.scopes == nil {
		return nil
	}
	r.unregisterProbes()
	err := r.scopes.Release()
	r.scopes = nil
	return err
}

// watchedDirNames lists the directories watched for written files.
func (r *logsReceiver) watchedDirNames() []string {
	if r.dirs == nil {
		return nil
	}
	return r.dirs.Dirs()
}

// anyFileMatch reports whether a probe matches binaries by regex: only
// those need mapping events.
func (r *logsReceiver) anyFileMatch() bool {
	for _, p := range r.cfg.Probes {
		if p.FileMatch != "" {
			return true
		}
	}
	return false
}

func mappingsName(s procwatch.MappingSource) string {
	if s == procwatch.MappingsNone {
		return "none: libraries found by rescanning after exec"
	}
	return string(s)
}

// latencyField summarizes the attach latencies of trigger for a log line.
func latencyField(l *latencies, trigger string) zap.Field {
	n, p50, p99 := l.percentiles(trigger)
	return zap.String("attach_latency_"+trigger, fmt.Sprintf("n=%d p50=%s p99=%s", n, p50, p99))
}

// closeAll frees what a failed Start created.
func (r *logsReceiver) closeAll() {
	if r.watcher != nil {
		r.watcher.Close()
	}
	if r.dirs != nil {
		r.dirs.Close()
	}
	if r.tracker != nil {
		r.tracker.close()
	}
	if r.stop != nil {
		close(r.stop)
	}
	if r.warmer != nil {
		r.warmer.Close()
	}
	if r.probes != nil {
		r.probes.Flush()
		r.probes.Close()
	}
	r.wg.Wait()
	r.probes = nil
	r.releaseScopes()
}
