package uproberecv

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

// registerTelemetry publishes the receiver's counters as the self-metrics
// declared in metadata.yaml, read when the collector's metrics reader asks.
func (r *logsReceiver) registerTelemetry() error {
	tb, err := metadata.NewTelemetryBuilder(r.set.TelemetrySettings)
	if err != nil {
		return err
	}
	r.telemetry = tb
	observe := func(o metric.Int64Observer, v int64, key, value string) {
		o.Observe(v, metric.WithAttributes(attribute.String(key, value)))
	}
	r.tracker.latency.onRecord = func(trigger string, d time.Duration) {
		tb.UprobeAttachLatency.Record(context.Background(), float64(d)/float64(time.Millisecond),
			metric.WithAttributes(attribute.String("trigger", trigger)))
	}
	counter := func(v *atomic.Int64) metric.Int64Callback {
		return func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(v.Load())
			return nil
		}
	}
	st := &r.tracker.stats
	return errors.Join(
		tb.RegisterUprobeExportRequestsCallback(counter(&r.requests)),
		tb.RegisterUprobeKnownFailuresSkippedCallback(counter(&st.knownFailures)),
		tb.RegisterUprobeProcessesExitedBeforeAttachCallback(counter(&st.exitedBeforeAttach)),
		tb.RegisterUprobeSymbolLookupCPUTimeCallback(counter(&st.lookupCPUNanos)),
		tb.RegisterUprobeExitsWithoutEntryCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.probes.Counters()
			if err != nil {
				return err
			}
			o.Observe(int64(c.ExitWithoutEntry))
			return nil
		}),
		tb.RegisterUprobeBinariesAttachedCallback(func(_ context.Context, o metric.Int64Observer) error {
			binaries, _ := r.tracker.attachedTotals()
			o.Observe(int64(binaries))
			return nil
		}),
		tb.RegisterUprobeUprobesAttachedCallback(func(_ context.Context, o metric.Int64Observer) error {
			_, uprobes := r.tracker.attachedTotals()
			o.Observe(int64(uprobes))
			return nil
		}),
		tb.RegisterUprobeBinariesEvaluatedCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.tracker.stats.evaluations.Load())
			return nil
		}),
		tb.RegisterUprobeBinariesEvictedCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.tracker.stats.evicted.Load())
			return nil
		}),
		tb.RegisterUprobeNegativeCacheHitsCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.tracker.stats.negativeHits.Load())
			return nil
		}),
		tb.RegisterUprobeEntriesFilteredCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.probes.Counters()
			if err != nil {
				return err
			}
			o.Observe(int64(c.Filtered))
			return nil
		}),
		tb.RegisterUprobeRecordsEmittedCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.exported.Load())
			return nil
		}),
		tb.RegisterUprobeRecordsLostCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.probes.Counters()
			if err != nil {
				return err
			}
			observe(o, int64(c.LostRingbuf), "reason", "ringbuf_full")
			observe(o, int64(c.ScopeFull), "reason", "scope_table_full")
			observe(o, int64(c.ReturnUnprobed), "reason", "return_unprobed")
			observe(o, r.refused.Load(), "reason", "export_refused")
			return nil
		}),
		tb.RegisterUprobeRingbufDropsCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := r.probes.Counters()
			if err != nil {
				return err
			}
			w, err := r.watcher.Counters()
			if err != nil {
				return err
			}
			observe(o, int64(c.LostRingbuf), "ringbuf", "scope_records")
			observe(o, int64(w.LostRingbuf), "ringbuf", "process_events")
			return nil
		}),
	)
}
