package uproberecv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/procwatch"
	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

const (
	// maxBatchRecords bounds one ConsumeLogs call.
	maxBatchRecords = 4096
	// flushInterval bounds how long a record waits for its batch to fill.
	flushInterval = 200 * time.Millisecond
	// pollInterval bounds how long a record waits in the ringbuf: records
	// wake the reader only in bulk (wakeupBytes), so it also reads on a timer.
	pollInterval = 50 * time.Millisecond
	// clockRefreshInterval is how often the ktime to Unix offset is measured.
	clockRefreshInterval = 10 * time.Second
	// ringBufferBytes holds about 50k records: a quarter second at the
	// throughput goal, enough to ride out a slow consumer.
	ringBufferBytes = 4 << 20
	// wakeupBytes is the ringbuf fill at which a record wakes the reader
	// before its poll: an eighth leaves room for a poll interval at the
	// throughput goal.
	wakeupBytes = ringBufferBytes / 8
)

// options are knobs tests and benchmarks turn; users do not.
type options struct {
	// noNegativeCache evaluates every binary afresh, to measure the cache.
	noNegativeCache bool
	// loadFiller loads the record filler program, for benchmarks.
	loadFiller bool
}

// ktimeClock is the clock logBuilder converts record times with: only an
// adapter that keeps logBuilder's signature, which is being reworked in
// parallel; logBuilder can take a *ktime.Clock directly.
type ktimeClock struct{ ktime.Clock }

func (c *ktimeClock) unixNanos(t uint64) int64 { return c.UnixNanos(t) }

// logsReceiver turns scope records into log records.
type logsReceiver struct {
	set     receiver.Settings
	cfg     *Config
	opts    options
	next    consumer.Logs
	obsrecv *receiverhelper.ObsReport

	probes  *scopeprobe.Probes
	watcher *procwatch.Watcher
	tracker *tracker
	clock   ktimeClock
	infos   *processInfos

	wg        sync.WaitGroup
	stop      chan struct{}
	telemetry *metadata.TelemetryBuilder

	// Counts since start, logged at shutdown.
	read        atomic.Int64
	exported    atomic.Int64
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
	return &logsReceiver{set: set, cfg: cfg, next: next, obsrecv: obsrecv}, nil
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
	if len(r.cfg.Probes) == 0 {
		r.set.Logger.Warn("uprobe receiver has no probes: nothing to do")
		return nil
	}
	r.cfg.logMissingBinaries(r.set.Logger)
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
	r.probes, err = scopeprobe.New(scopeprobe.Options{
		Settings:        settings,
		RingBufferBytes: ringBufferBytes,
		WakeupBytes:     wakeupBytes,
		LoadFiller:      r.opts.loadFiller,
	})
	if err != nil {
		return fmt.Errorf("starting uprobe receiver: %w", err)
	}
	r.clock.Refresh()
	r.infos = newProcessInfos()
	var negative *negcache.Files
	if !r.opts.noNegativeCache {
		negative = negcache.NewFiles(negativeTTL, maxNegative)
	}
	if r.tracker, err = newTracker(r.set.Logger, r.cfg.Probes, probesAttacher{r.probes}, negative, r.infos); err != nil {
		return fmt.Errorf("starting uprobe receiver: %w", err)
	}
	// Watch before scanning, so a process started during the scan is not
	// missed; one seen twice is harmless.
	if r.watcher, err = procwatch.New(); err != nil {
		return fmt.Errorf("starting uprobe receiver: %w", err)
	}
	r.stop = make(chan struct{})
	builder := newLogBuilder(metadata.ScopeName, r.set.BuildInfo.Version, ids, &r.clock, r.infos)
	r.wg.Add(3)
	go r.drainRecords(builder)
	go r.watchProcesses()
	go r.refreshClock()
	if err := r.tracker.scanAll(); err != nil {
		return fmt.Errorf("starting uprobe receiver: %w", err)
	}
	if err := r.registerTelemetry(); err != nil {
		r.set.Logger.Warn("self-metrics unavailable", zap.Error(err))
	}
	r.set.Logger.Info("uprobe receiver started",
		zap.Strings("probes", ids),
		zap.Int64("binaries_attached", r.tracker.stats.attached.Load()),
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
			r.tracker.exec(int(ev.PID), ev.Exe)
		case procwatch.Exit:
			r.tracker.exit(int(ev.PID))
		}
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
		}
	}
}

// drainRecords reads records into batches, handing a batch on when it is
// full or its first record waited flushInterval. Between batches it polls
// every pollInterval for records that did not wake it.
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
				r.probes.SetDeadline(time.Now().Add(flushInterval))
			}
			b.add(&rec, pcommon.NewTimestampFromTime(time.Now()))
			if b.records >= maxBatchRecords {
				r.flush(b)
			}
		case errors.Is(err, scopeprobe.ErrDeadline):
			r.flush(b)
		case errors.Is(err, scopeprobe.ErrFlushed):
			// Shutdown detached every uprobe and flushed: all records read.
			r.flush(b)
			return
		case errors.Is(err, scopeprobe.ErrClosed):
			r.flush(b)
			return
		default:
			r.set.Logger.Error("reading scope records stopped", zap.Error(err))
			r.flush(b)
			return
		}
	}
}

func (r *logsReceiver) flush(b *logBuilder) {
	r.probes.SetDeadline(time.Now().Add(pollInterval))
	if b.records == 0 {
		return
	}
	logs, n := b.take()
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
	counters, _ := r.probes.Counters()
	errs = append(errs, r.probes.Close())
	st := &r.tracker.stats
	r.set.Logger.Info("uprobe receiver stopped",
		zap.Int64("records_read", r.read.Load()),
		zap.Int64("records_exported", r.exported.Load()),
		zap.Int64("records_refused", r.refused.Load()),
		zap.Uint64("records_lost_ringbuf", counters.LostRingbuf),
		zap.Uint64("exits_without_entry", counters.ExitWithoutEntry),
		zap.Uint64("scopes_shorter_than_min", counters.Short),
		zap.Uint64("scopes_not_stored", counters.ScopeFull),
		zap.Uint64("entries_filtered", counters.Filtered),
		zap.Int64("process_events", r.eventsRead.Load()),
		zap.Int64("processes_scanned", st.scans.Load()),
		zap.Int64("binaries_evaluated", st.evaluations.Load()),
		zap.Int64("negative_cache_hits", st.negativeHits.Load()),
		zap.Int64("execs_answered_from_event", st.quietExecs.Load()),
		zap.Duration("clock_offset_uncertainty", r.clock.Uncertainty()),
		zap.Duration("clock_offset_max_step", r.clock.MaxStep()))
	r.probes = nil
	return errors.Join(errs...)
}

// closeAll frees what a failed Start created.
func (r *logsReceiver) closeAll() {
	if r.watcher != nil {
		r.watcher.Close()
	}
	if r.tracker != nil {
		r.tracker.close()
	}
	if r.stop != nil {
		close(r.stop)
	}
	if r.probes != nil {
		r.probes.Flush()
		r.probes.Close()
	}
	r.wg.Wait()
	r.probes = nil
}
