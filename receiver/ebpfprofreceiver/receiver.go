package ebpfprofreceiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
	"github.com/bpfcol/bpfcol/internal/bpf/support"
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/interp/hotspot"
	"github.com/bpfcol/bpfcol/internal/interp/python"
	"github.com/bpfcol/bpfcol/internal/interp/v8"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/symbolize/kernelsym"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
	"github.com/bpfcol/bpfcol/internal/unwind/loader"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/aggregate"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/profilebuilder"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/resolve"
)

const (
	// sampleQueueSize bounds the samples between the ringbuf drain and the
	// aggregator; when it is full the drain drops and counts, never waits.
	sampleQueueSize = 8192
	// maxDrainBatch bounds the samples handed over at once.
	maxDrainBatch = 256
	// drainInterval is how often the ringbuf is drained when it is less
	// than half full. Every wakeup costs the collector far more than the
	// samples it reads, so it is long: the ringbuf holds about 2 s of
	// samples (a quarter of it fills in this time), and each report
	// interval ends with a drain of its own, so no sample waits for the
	// next report.
	drainInterval = 500 * time.Millisecond
	// firstDrainInterval is the drain interval until the first sample is
	// read, so that the start of sampling shows at once.
	firstDrainInterval = 100 * time.Millisecond
	// batchQueueSize bounds the intervals waiting for symbolization and
	// export; when it is full an interval is dropped and counted.
	batchQueueSize = 2
	// maxBinaries and maxBinaryBytes bound the opened binaries kept for
	// symbolization, by count (each holds a descriptor and a mapping) and
	// by their own heap (their parsed tables are bounded apart, with their
	// debug files', by symbolize.DefaultMaxTableBytes, 16 MiB). Copies of
	// one build are one binary.
	maxBinaries    = 512
	maxBinaryBytes = 4 << 20
)

// profilesReceiver runs the pipeline BPF sampler → aggregate → resolve →
// pdata → consumer, one goroutine per stage so no stage waits on a later one.
type profilesReceiver struct {
	set     receiver.Settings
	cfg     *Config
	next    xconsumer.Profiles
	obsrecv *receiverhelper.ObsReport

	sampler      *profiler.Sampler
	unwind       *loader.Loader
	unwindTables *cfi.Store[process.FileKey]
	stopUnwind   context.CancelFunc
	binaries     *symbolize.BinaryCache
	// snapshots keeps the mappings of sampled processes past their exit,
	// from the sampler's notices, which watchNotices reads until
	// noticesDone.
	snapshots   *process.Snapshots
	noticesDone chan struct{}
	kernelSyms  *kernelsym.Symbolizer
	symbolizer  *symbolize.Symbolizer
	telemetry   *metadata.TelemetryBuilder
	wg          sync.WaitGroup

	// scopes is the shared map of open probe scopes, when a uprobe
	// receiver writes it; undeclare withdraws the scopes.Reader role.
	scopes    *scopes.Map
	undeclare func()

	aggregator *aggregate.Aggregator
	resolver   *resolve.Resolver
	// interps follows the processes that run an interpreter; nil when
	// the interpreters setting is empty.
	interps    *interp.Manager
	samples    chan drained
	batches    chan *aggregate.Batch
	samplePool sync.Pool

	counts           sampleCounts
	callersRecovered atomic.Int64
	unknownProcesses atomic.Int64
	// unmappedLeaves and truncatedStacks count the user stacks the
	// aggregator dropped or cut (aggregate.Stats).
	unmappedLeaves, truncatedStacks atomic.Int64
	// unplacedInterpreted counts samples whose interpreted frames
	// found no loop frame (aggregate.Stats).
	unplacedInterpreted atomic.Int64
	profilesEmitted     atomic.Int64
	// stopMemoryLimit gives up the Go memory limit (goMemoryLimiter).
	stopMemoryLimit func()
	firstSample     atomic.Bool
	startedAt       time.Time
	// interpreters are those unwound since Start (chooseInterpreters).
	interpreters []string

	hooks testHooks
}

// testHooks let tests make the faults they reproduce; all are unset in
// production.
type testHooks struct {
	// ringBufferBytes sizes the sampler's ringbuf (profiler.Options).
	ringBufferBytes int
	// samplePID samples that process alone (profiler.Options.PID): its
	// BPF time per sample is the sampler's.
	samplePID int
	// drainStart, when set, holds the drain back until it is closed.
	drainStart <-chan struct{}
	// afterStop runs in Shutdown once sampling stopped, before the drain
	// is flushed.
	afterStop func()
}

// sampleCounts follow every sample read from the ringbuf to where it ends:
// exported, or dropped for one reason. Once the pipeline has stopped,
// read = exported + the drops.
type sampleCounts struct {
	read atomic.Int64
	// exported counts samples (each aggregated stack weighs its count)
	// in profiles the next consumer accepted.
	exported atomic.Int64
	// droppedQueue: the aggregator's queue was full.
	droppedQueue atomic.Int64
	// droppedStacks: the interval's stack table was full.
	droppedStacks atomic.Int64
	// droppedBatch: the export queue was full.
	droppedBatch atomic.Int64
	// refused: the next consumer refused the profiles.
	refused atomic.Int64
}

// The reasons a sample was dropped, as the ebpfprof_samples_dropped metric
// names them; the shutdown log names its counts samples_dropped_REASON.
const (
	dropRingbufFull    = "ringbuf_full"
	dropQueueFull      = "queue_full"
	dropStackTableFull = "stack_table_full"
	dropBatchQueueFull = "batch_queue_full"
	dropExportRefused  = "export_refused"
)

// logFields returns the counts as the shutdown log writes them, with the
// sampler's own counters: the samples it recorded into the ringbuf and
// those the full ringbuf dropped. When the pipeline did not stop in time,
// the samples read but not yet exported or dropped are counted as dropped
// at shutdown, so read = exported + dropped still holds in the log.
func (c *sampleCounts) logFields(bpf profiler.Counters, pipelineStopped bool) []zap.Field {
	// A sample is counted read before it is counted anywhere else: loading
	// read last keeps read >= exported + drops while the pipeline runs.
	exported, queue, stacks := c.exported.Load(), c.droppedQueue.Load(), c.droppedStacks.Load()
	batch, refused := c.droppedBatch.Load(), c.refused.Load()
	read := c.read.Load()
	var undelivered int64
	if !pipelineStopped {
		undelivered = read - exported - queue - stacks - batch - refused
	}
	return []zap.Field{
		zap.Uint64("samples_taken", bpf.Recorded()),
		zap.Uint64("samples_dropped_"+dropRingbufFull, bpf.DroppedRingbuf),
		zap.Int64("samples_read", read),
		zap.Int64("samples_exported", exported),
		zap.Int64("samples_dropped", queue+stacks+batch+refused+undelivered),
		zap.Int64("samples_dropped_"+dropQueueFull, queue),
		zap.Int64("samples_dropped_"+dropStackTableFull, stacks),
		zap.Int64("samples_dropped_"+dropBatchQueueFull, batch),
		zap.Int64("samples_dropped_"+dropExportRefused, refused),
		zap.Int64("samples_dropped_shutdown_timeout", undelivered),
	}
}

func newProfilesReceiver(set receiver.Settings, cfg *Config, next xconsumer.Profiles) (*profilesReceiver, error) {
	obsrecv, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID:             set.ID,
		Transport:              "bpf",
		ReceiverCreateSettings: set,
	})
	if err != nil {
		return nil, fmt.Errorf("creating obsreport: %w", err)
	}
	// Declared at creation: the collector creates every component before
	// it starts any, so a uprobe receiver starting first knows of this one.
	r := &profilesReceiver{set: set, cfg: cfg, next: next, obsrecv: obsrecv, undeclare: scopes.Declare(scopes.Reader)}
	r.samplePool.New = func() any { return new(profiler.Sample) }
	return r, nil
}

// Start loads the sampler and starts the pipeline. It fails with the name of
// whatever is missing: a capability, BTF or a kernel feature; under
// error_mode ignore it logs that and leaves the receiver inactive.
func (r *profilesReceiver) Start(ctx context.Context, host component.Host) error {
	return r.cfg.ErrorMode.OnStartError(r.set.Logger, r.start(ctx, host))
}

func (r *profilesReceiver) start(_ context.Context, _ component.Host) error {
	r.startedAt = time.Now()
	// The sampler and the kernel symbolizer share one parse of the
	// kernel's BTF, dropped once both are loaded.
	defer support.ReleaseKernelTypes()
	// The walk's registers, frame records and CFI rules are x86-64's and
	// arm64's.
	if err := support.Check(support.Architecture("the stack walk (frame records, CFI rules, a frameless leaf's caller)", "amd64", "arm64")); err != nil {
		return fmt.Errorf("starting ebpfprof receiver: %w", err)
	}
	r.chooseInterpreters()
	r.stopMemoryLimit = startGoMemoryLimit(r.cfg.GoMemoryLimit)
	// Samples are linked to open probe scopes only when a uprobe receiver
	// runs in this collector: alone, the sampler pays no lookup.
	var shared *ebpf.Map
	if scopes.Declared(scopes.Writer) {
		// What the sampler needs is checked first: without CAP_BPF the
		// shared map's creation fails too, with EPERM naming nothing.
		if err := profiler.CheckSupport(); err != nil {
			return fmt.Errorf("starting ebpfprof receiver: %w", err)
		}
		m, err := scopes.Acquire()
		if err != nil {
			return fmt.Errorf("starting ebpfprof receiver: %w", err)
		}
		r.scopes, shared = m, m.Map()
	}
	sampler, err := profiler.New(profiler.Options{
		Frequency:       r.cfg.SamplingFrequency,
		RingBufferBytes: r.hooks.ringBufferBytes,
		PID:             r.hooks.samplePID,
		UnwindRows:      int(r.cfg.UnwindTableBytes / profiler.UnwindRowBytes),
		OffCPU:          r.cfg.OffCPU.samplerOptions(),
		Scopes:          shared,
		Python:          r.interpreter(python.Name),
		HotSpot:         r.interpreter(hotspot.Name),
		V8:              r.interpreter(v8.Name),
	})
	if err != nil {
		r.releaseScopes()
		return fmt.Errorf("starting ebpfprof receiver: %w", err)
	}
	// Kernel frames are named in BPF; without CAP_PERFMON (or on an old
	// kernel) the symbolizer falls back to /proc/kallsyms and logs why once.
	kernelSyms, err := kernelsym.New(kernelsym.Options{Logger: r.set.Logger})
	if err != nil {
		sampler.Close()
		r.releaseScopes()
		return fmt.Errorf("starting kernel symbolizer: %w", err)
	}
	// From here on Shutdown owns what Start created.
	r.sampler, r.kernelSyms = sampler, kernelSyms
	scfg := r.cfg.Symbolizer.symbolizeConfig()
	scfg.Logger = r.set.Logger
	// One bound for the parsed tables of the binaries and of their debug
	// files.
	scfg.Tables = symbolize.NewTables(scfg.MaxTableBytes)
	r.binaries = symbolize.NewBinaryCache(maxBinaries, maxBinaryBytes, scfg.Tables)
	r.symbolizer, err = symbolize.NewSymbolizer(scfg)
	if err == nil && scfg.CacheDir == "" && r.symbolizer.FetchingConfigured() {
		// No cache_dir and no user cache directory to default to (a
		// service started without $HOME): the servers would be ignored
		// without a word.
		_, dirErr := os.UserCacheDir()
		r.set.Logger.Warn("debug files not fetched from debuginfod: no cache directory to keep them in; set symbolizer::cache_dir",
			zap.NamedError("user_cache_dir", dirErr))
	}
	if cacheErr := (*symbolize.CacheDirError)(nil); errors.As(err, &cacheErr) {
		// Only fetching and caching need the directory: the debug files
		// on the host (/usr/lib/debug, debug_directories) are still read.
		r.set.Logger.Warn("debug files not fetched from debuginfod nor cached: the cache directory cannot be used",
			zap.String("cache_dir", scfg.CacheDir), zap.Error(err))
		scfg.CacheDir = ""
		r.symbolizer, err = symbolize.NewSymbolizer(scfg)
	}
	if err != nil {
		r.set.Logger.Warn("user frames named from the mapped binaries only", zap.Error(err))
	}
	r.startInterpreters()
	r.startUnwind()
	r.samples = make(chan drained, sampleQueueSize/maxDrainBatch)
	r.batches = make(chan *aggregate.Batch, batchQueueSize)

	// CFI tables are loaded on their own goroutine: sampling and
	// aggregation never wait for them.
	unwindCtx, stopUnwind := context.WithCancel(context.Background())
	r.stopUnwind = stopUnwind
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.unwind.Run(unwindCtx) }()
	if r.interps != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.interps.Run(unwindCtx) }()
	}

	r.startSnapshots()
	aggCfg := aggregate.Config{Binaries: aggregateBinaries(r.binaries), Snapshots: r.snapshots}
	var opts []resolve.Option
	if r.interps != nil {
		aggCfg.Interpreters = r.interps
		opts = append(opts, resolve.WithInterpreters(r.interps))
	}
	r.aggregator = aggregate.New(aggCfg)
	if r.symbolizer != nil {
		opts = append(opts, resolve.WithSymbolizer(r.symbolizer))
	}
	opts = append(opts, resolve.WithSnapshots(r.snapshots))
	r.resolver = resolve.New(r.binaries, r.kernelSyms, opts...)
	if err := r.registerTelemetry(); err != nil {
		r.set.Logger.Warn("self-metrics unavailable", zap.Error(err))
	}
	r.wg.Add(3)
	go r.drain(sampler)
	go r.aggregate(sampler)
	go r.export()

	if r.cfg.OffCPU.Enabled && !sampler.OffCPUTaskWork() {
		r.set.Logger.Warn("off-CPU user stacks are walked in sched_switch, at a higher cost per sampled context switch",
			zap.NamedError("reason", profiler.CheckOffCPUTaskWork()))
	}
	r.set.Logger.Info("ebpfprof receiver started",
		zap.Int("cpus", sampler.CPUs()),
		zap.Int("sampling_frequency_hz", r.cfg.SamplingFrequency),
		zap.Duration("report_interval", r.cfg.ReportInterval),
		zap.String("kernel_symbolizer", r.kernelSyms.Path()),
		zap.Duration("start_duration", time.Since(r.startedAt)))
	return nil
}

// drained is what the drain hands the aggregator: samples, and when a
// report interval ended after them, the time it ended.
type drained struct {
	samples []*profiler.Sample
	// report, when not zero, ends the interval after these samples.
	report time.Time
}

// drain moves samples from the ringbuf to the aggregator, in batches every
// drainInterval (sooner when the ringbuf is half full): one wakeup per
// batch instead of one per sample. It also keeps the report interval: at
// its end it reads the ringbuf empty and tells the aggregator to flush, so
// an interval holds every sample read up to its end. It never blocks on
// the aggregator: when the queue is full the batch is counted and dropped
// (an interval's end is handed over with the next batch). At shutdown it
// reads what is left in the ringbuf, up to ErrFlushed, and hands the last
// batch over, waiting for the aggregator if it must.
//
// It takes the sampler as an argument: Shutdown forgets r.sampler when it
// gives up waiting for the pipeline, and the drain may still be reading.
func (r *profilesReceiver) drain(sampler *profiler.Sampler) {
	defer r.wg.Done()
	defer close(r.samples)
	if r.hooks.drainStart != nil {
		<-r.hooks.drainStart
	}
	batch := make([]*profiler.Sample, 0, maxDrainBatch)
	var reportDue time.Time // an interval's end not handed over yet
	handOver := func() {
		if len(batch) == 0 && reportDue.IsZero() {
			return
		}
		select {
		case r.samples <- drained{samples: batch, report: reportDue}:
			reportDue = time.Time{}
		default:
			r.counts.droppedQueue.Add(int64(len(batch)))
			for _, s := range batch {
				r.samplePool.Put(s)
			}
		}
		batch = make([]*profiler.Sample, 0, maxDrainBatch)
	}
	interval := firstDrainInterval
	nextReport := time.Now().Add(r.cfg.ReportInterval)
	setDeadline := func(now time.Time) {
		d := now.Add(interval)
		if nextReport.Before(d) {
			d = nextReport
		}
		sampler.SetDeadline(d)
	}
	setDeadline(time.Now())
	for {
		s := r.samplePool.Get().(*profiler.Sample)
		err := sampler.Read(s)
		switch {
		case err == nil:
			if r.firstSample.CompareAndSwap(false, true) {
				r.set.Logger.Info("first sample received", zap.Duration("since_start", time.Since(r.startedAt)))
				interval = drainInterval
			}
			r.counts.read.Add(1)
			if batch = append(batch, s); len(batch) == maxDrainBatch {
				handOver()
			}
		case errors.Is(err, profiler.ErrDeadline):
			r.samplePool.Put(s)
			// The ringbuf is empty: every sample taken so far is read.
			now := time.Now()
			if !now.Before(nextReport) {
				reportDue = now
				nextReport = nextReport.Add(r.cfg.ReportInterval)
				if !now.Before(nextReport) {
					// Late by a whole interval (a stalled host):
					// start afresh rather than report in a burst.
					nextReport = now.Add(r.cfg.ReportInterval)
				}
			}
			handOver()
			setDeadline(now)
		case errors.Is(err, profiler.ErrFlushed):
			// Sampling stopped and the ringbuf is empty: the last batch.
			r.samplePool.Put(s)
			if len(batch) > 0 || !reportDue.IsZero() {
				r.samples <- drained{samples: batch, report: reportDue}
			}
			return
		default:
			if !errors.Is(err, profiler.ErrClosed) {
				r.set.Logger.Error("reading samples stopped", zap.Error(err))
			}
			handOver()
			return
		}
	}
}

// aggregate counts samples and hands one batch per report interval to the
// exporter, when the drain says the interval ended. When the drain stops
// (at shutdown) the last, partial interval is handed over too, waiting for
// the exporter if it must. It takes the sampler as an argument, as drain
// does.
func (r *profilesReceiver) aggregate(sampler *profiler.Sampler) {
	defer r.wg.Done()
	defer close(r.batches)
	agg := r.aggregator
	handOver := func(b *aggregate.Batch, last bool) {
		r.counts.droppedStacks.Add(b.Stats.DroppedStacksFull)
		r.callersRecovered.Add(b.Stats.CallersRecovered)
		r.unknownProcesses.Add(b.Stats.UnknownProcesses)
		r.unmappedLeaves.Add(b.Stats.UnmappedLeaves)
		r.truncatedStacks.Add(b.Stats.TruncatedStacks)
		r.unplacedInterpreted.Add(b.Stats.UnplacedInterpreted)
		if len(b.Stacks) == 0 {
			return
		}
		if last {
			r.batches <- b
			return
		}
		select {
		case r.batches <- b:
		default:
			r.counts.droppedBatch.Add(b.Samples())
		}
	}
	for d := range r.samples {
		for _, s := range d.samples {
			agg.Add(s)
			r.samplePool.Put(s)
		}
		r.unwind.Tick(time.Now())
		// Exits come without a wakeup: read them now at the latest.
		sampler.PollNotices()
		// Exits alone expire snapshots only while processes exit.
		r.snapshots.Expire(time.Now())
		if !d.report.IsZero() {
			handOver(agg.Flush(d.report), false)
		}
	}
	handOver(agg.Flush(time.Now()), true)
}

// export names the frames of each batch, builds pdata and hands it on.
func (r *profilesReceiver) export() {
	defer r.wg.Done()
	meta := profilebuilder.Meta{
		PeriodNanos:  int64(time.Second) / int64(r.cfg.SamplingFrequency),
		ScopeName:    metadata.ScopeName,
		ScopeVersion: r.set.BuildInfo.Version,
		ProbeName:    scopes.ProbeName,
	}
	for b := range r.batches {
		procs := r.resolver.Resolve(b)
		meta.Start, meta.End = b.Start, b.End
		profiles := profilebuilder.Build(procs, meta)
		ctx := r.obsrecv.StartProfilesOp(context.Background())
		err := r.next.ConsumeProfiles(ctx, profiles)
		// obsreport counts pdata records (one per distinct stack); the
		// shutdown log and samples_dropped count samples.
		r.obsrecv.EndProfilesOp(ctx, "pprofile", profiles.SampleCount(), err)
		if err == nil {
			r.counts.exported.Add(b.Samples())
			if r.profilesEmitted.Add(1) == pageOutAfterReports && r.cfg.PageOutStartupImage {
				r.pageOutImage()
			}
		} else {
			// The pipeline refused: the batch is dropped, never retried
			// here, so memory stays bounded.
			r.counts.refused.Add(b.Samples())
		}
	}
}

// pageOutAfterReports is the report after which start-up is over: the
// binaries sampled first have been named, and the exporters have sent.
const pageOutAfterReports = 2

// pageOutImage reclaims the pages of the collector's executable that
// start-up read (see Config.PageOutStartupImage).
func (r *profilesReceiver) pageOutImage() {
	n, err := pageOutImage()
	if err != nil {
		r.set.Logger.Debug("start-up pages of the executable not paged out", zap.Error(err))
		return
	}
	r.set.Logger.Debug("start-up pages of the executable paged out", zap.Int64("mapped_bytes", n))
}

// Shutdown stops sampling, reads what is left in the ringbuf, exports it
// with what was aggregated so far, logs the counts and frees every kernel
// object. Waiting for the export is bounded by ctx; what is not delivered
// by then is counted as dropped. It is safe to call without Start and more
// than once.
func (r *profilesReceiver) Shutdown(ctx context.Context) error {
	r.undeclare()
	if r.stopMemoryLimit != nil {
		defer r.stopMemoryLimit()
	}
	if r.sampler == nil {
		return nil
	}
	log := r.set.Logger
	r.stopUnwind()
	// The maps stay open: the drain reads the ringbuf to its end and the
	// counters are read after it.
	err := r.sampler.Stop()
	if r.hooks.afterStop != nil {
		r.hooks.afterStop()
	}
	err = errors.Join(err, r.sampler.Flush())
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	stopped := true
	select {
	case <-done:
	case <-ctx.Done():
		stopped = false
		err = errors.Join(err, fmt.Errorf("waiting for the pipeline to stop: %w", ctx.Err()))
	}
	// The same counters the self-metrics read, read after the drain.
	counters, cerr := r.sampler.Counters()
	if cerr != nil {
		log.Error("shutdown summary without the sampler's counters", zap.Error(cerr))
		err = errors.Join(err, cerr)
	}
	fields := r.counts.logFields(counters, stopped)
	if !stopped {
		log.Warn("pipeline did not stop before the shutdown deadline: samples not yet exported are counted as samples_dropped_shutdown_timeout",
			zap.Error(ctx.Err()))
	}
	log.Info("ebpfprof receiver stopped", fields...)
	if r.telemetry != nil {
		r.telemetry.Shutdown()
	}
	// The binaries close before the symbolizer: their sections spilled
	// under its cache directory are removed through it.
	err = errors.Join(err, r.sampler.Close(), r.unwindTables.Close(), r.binaries.Close())
	<-r.noticesDone // ends once the sampler is closed
	if r.symbolizer != nil {
		err = errors.Join(err, r.symbolizer.Close())
	}
	err = errors.Join(err, r.kernelSyms.Close(), r.releaseScopes(), r.snapshots.Close())
	r.sampler = nil
	return err
}

// releaseScopes drops the receiver's reference to the shared map of open
// scopes, if it took one.
func (r *profilesReceiver) releaseScopes() error {
	if r.scopes == nil {
		return nil
	}
	err := r.scopes.Release()
	r.scopes = nil
	return err
}
