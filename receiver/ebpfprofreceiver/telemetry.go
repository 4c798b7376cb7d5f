package ebpfprofreceiver

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// registerTelemetry publishes the receiver's counters as the self-metrics
// declared in metadata.yaml. Every value is read when the collector's
// metrics reader asks, so the hot path only bumps atomics.
func (r *profilesReceiver) registerTelemetry() error {
	tb, err := metadata.NewTelemetryBuilder(r.set.TelemetrySettings)
	if err != nil {
		return err
	}
	r.telemetry = tb
	observe := func(o metric.Int64Observer, v int64, key, value string) {
		o.Observe(v, metric.WithAttributes(attribute.String(key, value)))
	}
	return errors.Join(
		tb.RegisterEbpfprofSamplesTakenCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			o.Observe(int64(c.Recorded()))
			return nil
		}),
		tb.RegisterEbpfprofSamplesDroppedCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			observe(o, int64(c.DroppedRingbuf), "reason", dropRingbufFull)
			observe(o, r.counts.droppedQueue.Load(), "reason", dropQueueFull)
			observe(o, r.counts.droppedStacks.Load(), "reason", dropStackTableFull)
			observe(o, r.counts.droppedBatch.Load(), "reason", dropBatchQueueFull)
			observe(o, r.counts.refused.Load(), "reason", dropExportRefused)
			return nil
		}),
		tb.RegisterEbpfprofStacksLostCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			observe(o, int64(c.UserStackErrors), "stack", "user")
			observe(o, int64(c.KernelStackErrors), "stack", "kernel")
			return nil
		}),
		tb.RegisterEbpfprofOffCPUEventsCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			observe(o, int64(c.OffCPUEvents), "outcome", "recorded")
			observe(o, int64(c.OffCPUShort), "outcome", "shorter_than_min_duration")
			observe(o, int64(c.OffCPUFull), "outcome", "threads_full")
			observe(o, int64(c.OffCPUMerged), "outcome", "merged")
			observe(o, int64(c.OffCPUBusy), "outcome", "walk_busy")
			observe(o, int64(c.OffCPUTaskWorkRefused), "outcome", "task_work_refused")
			observe(o, int64(c.OffCPUGone), "outcome", "thread_gone")
			observe(o, int64(c.OffCPUUnended), "outcome", "switch_in_unseen")
			return nil
		}),
		tb.RegisterEbpfprofOffCPUUnreportedSwitchesCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			o.Observe(int64(c.OffCPUUnreported))
			return nil
		}),
		tb.RegisterEbpfprofUnwindStopsCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			for reason, n := range c.UnwindStops {
				observe(o, int64(n), "reason", profiler.StopReason(reason).String())
			}
			return nil
		}),
		tb.RegisterEbpfprofUnwindTableEvictionsCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.unwind.Stats().Evictions)
			return nil
		}),
		tb.RegisterEbpfprofUnwindTableCompactionsCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.unwind.Stats().Compactions)
			return nil
		}),
		tb.RegisterEbpfprofUnwindErrorsCallback(func(_ context.Context, o metric.Int64Observer) error {
			u := r.unwind.Stats()
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			observe(o, u.LoadErrors, "reason", "process_load")
			observe(o, u.TableErrors, "reason", "table_build")
			observe(o, u.DroppedRequests, "reason", "request_dropped")
			observe(o, int64(c.FilesFull), "reason", "files_full")
			observe(o, int64(c.NoticesLost), "reason", "notice_lost")
			return nil
		}),
		tb.RegisterEbpfprofProcessReadsCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			_, reads, err := r.sampler.ComposeStats()
			if err != nil {
				return err
			}
			observe(o, int64(reads), "outcome", "read")
			observe(o, int64(c.ComposeDeferred), "outcome", "first_sample_deferred")
			observe(o, int64(c.ComposeBusy), "outcome", "lock_busy")
			observe(o, int64(c.ComposeOverflow), "outcome", "mappings_overflow")
			observe(o, int64(c.ComposeGone), "outcome", "thread_gone")
			observe(o, int64(c.ComposeRefused), "outcome", "task_work_refused")
			observe(o, int64(c.ProcessesFull), "outcome", "processes_full")
			return nil
		}),
		tb.RegisterEbpfprofProfilesEmittedCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.profilesEmitted.Load())
			return nil
		}),
		tb.RegisterEbpfprofBinariesClassifiedCallback(func(_ context.Context, o metric.Int64Observer) error {
			if r.symbolizer == nil {
				return nil
			}
			s := r.symbolizer.Stats()
			observe(o, s.ModeSkip, "mode", "skip")
			observe(o, s.ModeProcess, "mode", "process")
			observe(o, s.ModeFile, "mode", "file")
			return nil
		}),
		tb.RegisterEbpfprofSymbolizationOutcomesCallback(func(_ context.Context, o metric.Int64Observer) error {
			if r.symbolizer == nil {
				return nil
			}
			s := r.symbolizer.Stats()
			observe(o, s.LocalHits, "outcome", "local_hit")
			observe(o, s.Fetches, "outcome", "fetch")
			observe(o, s.FetchFailures, "outcome", "fetch_failure")
			observe(o, s.ParseFailures, "outcome", "parse_failure")
			observe(o, s.NegativeHits, "outcome", "negative_hit")
			observe(o, s.Pending, "outcome", "pending")
			observe(o, s.Unmapped, "outcome", "unmapped")
			return nil
		}),
		tb.RegisterEbpfprofParserPanicsCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(elfbin.ParserPanics())
			return nil
		}),
		tb.RegisterEbpfprofDebuginfodBytesCallback(func(_ context.Context, o metric.Int64Observer) error {
			if r.symbolizer != nil {
				o.Observe(r.symbolizer.Stats().FetchBytes)
			}
			return nil
		}),
		tb.RegisterEbpfprofCacheSizeCallback(func(_ context.Context, o metric.Int64Observer) error {
			b := r.binaries.Stats()
			observe(o, int64(b.Len), "cache", "binaries")
			observe(o, b.Cost, "cache", "binary_bytes")
			observe(o, int64(r.binaries.FileStats().Len), "cache", "binary_files")
			u := r.unwind.Stats()
			observe(o, u.Files, "cache", "unwind_tables")
			observe(o, u.RowBytes, "cache", "unwind_table_bytes")
			observe(o, u.Processes, "cache", "unwind_processes")
			if r.symbolizer != nil {
				s := r.symbolizer.Stats()
				observe(o, s.Tables, "cache", "debug_tables")
				observe(o, s.TableBytes, "cache", "debug_table_bytes")
			}
			names := r.resolver.NameCacheStats()
			observe(o, int64(names.Len), "cache", "frame_names")
			observe(o, names.Cost, "cache", "frame_name_bytes")
			leaves := r.aggregator.LeafCacheStats()
			observe(o, int64(leaves.Len), "cache", "leaf_functions")
			observe(o, leaves.Cost, "cache", "leaf_function_bytes")
			observe(o, int64(r.kernelSyms.Stats().Cache.Len), "cache", "kernel_names")
			snaps := r.snapshots.Stats()
			observe(o, snaps.Processes, "cache", "process_snapshots")
			observe(o, snaps.Bytes, "cache", "process_snapshot_bytes")
			observe(o, snaps.Files, "cache", "process_snapshot_files")
			if r.interps != nil {
				s := r.interps.Stats()
				var procs int64
				for _, c := range s.Clients {
					procs += c.Processes
				}
				observe(o, procs, "cache", "interpreter_processes")
				observe(o, int64(s.Objects.Len), "cache", "interpreter_objects")
				observe(o, s.Objects.Cost, "cache", "interpreter_object_bytes")
			}
			return nil
		}),
		tb.RegisterEbpfprofCacheEvictionsCallback(func(_ context.Context, o metric.Int64Observer) error {
			// Entries dropped for room and those dropped unused.
			dropped := func(s lru.Stats) int64 { return int64(s.Evictions + s.Expired) }
			observe(o, dropped(r.resolver.NameCacheStats()), "cache", "frame_names")
			observe(o, dropped(r.aggregator.LeafCacheStats()), "cache", "leaf_functions")
			observe(o, dropped(r.binaries.Stats()), "cache", "binaries")
			observe(o, dropped(r.binaries.FileStats()), "cache", "binary_files")
			observe(o, dropped(r.kernelSyms.Stats().Cache), "cache", "kernel_names")
			// Snapshots dropped for room before their process's last
			// samples were reported (not those that lingered their time).
			observe(o, r.snapshots.Stats().Dropped, "cache", "process_snapshots")
			if r.interps != nil {
				observe(o, dropped(r.interps.Stats().Objects), "cache", "interpreter_objects")
			}
			return nil
		}),
		tb.RegisterEbpfprofInterpreterProcessesCallback(func(_ context.Context, o metric.Int64Observer) error {
			if r.interps == nil {
				return nil
			}
			for name, c := range r.interps.Stats().Clients {
				attrs := func(outcome string) metric.ObserveOption {
					return metric.WithAttributes(attribute.String("interpreter", name), attribute.String("outcome", outcome))
				}
				o.Observe(c.Attached, attrs("attached"))
				o.Observe(c.Unsupported, attrs("unsupported"))
				o.Observe(c.Failed, attrs("failed"))
			}
			return nil
		}),
		tb.RegisterEbpfprofInterpreterFramesCallback(func(_ context.Context, o metric.Int64Observer) error {
			if r.interps == nil {
				return nil
			}
			for name, c := range r.interps.Stats().Clients {
				attrs := func(result string) metric.ObserveOption {
					return metric.WithAttributes(attribute.String("interpreter", name), attribute.String("result", result))
				}
				o.Observe(c.Named, attrs("named"))
				o.Observe(c.Unnamed, attrs("unnamed"))
				o.Observe(c.Reused, attrs("reused"))
			}
			return nil
		}),
		tb.RegisterEbpfprofInterpreterFramesUnplacedCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.unplacedInterpreted.Load())
			return nil
		}),
		tb.RegisterEbpfprofInterpreterReadErrorsCallback(func(_ context.Context, o metric.Int64Observer) error {
			if r.interps != nil {
				o.Observe(r.interps.Stats().ReadFailures)
			}
			return nil
		}),
		tb.RegisterEbpfprofInterpreterWalksCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			for reason, n := range c.InterpStops {
				observe(o, int64(n), "reason", profiler.InterpStop(reason).String())
			}
			return nil
		}),
		tb.RegisterEbpfprofJitFramesCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.sampler.Counters()
			if err != nil {
				return err
			}
			for result, n := range c.JITFrames {
				observe(o, int64(n), "result", profiler.JITFrameResult(result).String())
			}
			return nil
		}),
		tb.RegisterEbpfprofCallersRecoveredCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.callersRecovered.Load())
			return nil
		}),
		tb.RegisterEbpfprofProcessesUnknownCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.unknownProcesses.Load())
			return nil
		}),
		tb.RegisterEbpfprofUserStacksCutCallback(func(_ context.Context, o metric.Int64Observer) error {
			observe(o, r.unmappedLeaves.Load(), "reason", "leaf_unmapped")
			observe(o, r.truncatedStacks.Load(), "reason", "impossible_frame")
			return nil
		}),
		tb.RegisterEbpfprofFramesResolvedCallback(func(_ context.Context, o metric.Int64Observer) error {
			s := r.resolver.Stats()
			frames := func(v int64, stack, result string) {
				o.Observe(v, metric.WithAttributes(attribute.String("stack", stack), attribute.String("result", result)))
			}
			frames(s.UserNamed, "user", "named")
			frames(s.UserUnnamed, "user", "unnamed")
			frames(s.UserUnmapped, "user", "unmapped")
			frames(s.UserUnreadable, "user", "unreadable")
			frames(s.UserSkipped, "user", "skipped")
			frames(s.UserPending, "user", "pending")
			frames(s.KernelNamed, "kernel", "named")
			frames(s.KernelUnnamed, "kernel", "unnamed")
			return nil
		}),
		tb.RegisterEbpfprofKernelSymbolizerCallback(func(_ context.Context, o metric.Int64Observer) error {
			observe(o, 1, "path", r.kernelSyms.Path())
			return nil
		}),
	)
}
