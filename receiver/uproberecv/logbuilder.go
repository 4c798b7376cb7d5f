package uproberecv

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/process"
)

// recordAttributeCount is how many attributes a scope record has.
const recordAttributeCount = 8

// logBuilder groups records by process into one plog.Logs.
type logBuilder struct {
	scopeName    string
	scopeVersion string
	probeIDs     []string
	clock        *ktime.Clock
	infos        *process.InfoCache

	logs  plog.Logs
	byPID map[uint32]plog.LogRecordSlice
	// resources are the batch's resources by pid, described at take: the
	// exec event naming a process may be handled after its first records
	// were read.
	resources map[uint32]pcommon.Map
	records   int
	// heldSince says since when the records of each process not yet
	// described wait for its exec event: up to describeWait, then they go
	// out described or not.
	heldSince map[uint32]time.Time
}

// describeWait bounds how long the records of a process wait for the exec
// event that names it. The event is handled on another goroutine, behind
// the attach work of the processes before it: on one emulated CPU it was
// handled up to 1.7 s after the first batch that held the records.
const describeWait = 5 * time.Second

func newLogBuilder(scopeName, scopeVersion string, probeIDs []string, clock *ktime.Clock, infos *process.InfoCache) *logBuilder {
	b := &logBuilder{scopeName: scopeName, scopeVersion: scopeVersion, probeIDs: probeIDs, clock: clock, infos: infos, heldSince: map[uint32]time.Time{}}
	b.reset()
	return b
}

func (b *logBuilder) reset() {
	b.logs = plog.NewLogs()
	b.byPID = map[uint32]plog.LogRecordSlice{}
	b.resources = map[uint32]pcommon.Map{}
	b.records = 0
}

// add appends one record, read at observed.
func (b *logBuilder) add(r *scopeprobe.Record, observed pcommon.Timestamp) {
	records, ok := b.byPID[r.PID]
	if !ok {
		rl := b.logs.ResourceLogs().AppendEmpty()
		res := rl.Resource().Attributes()
		res.PutInt(conventions.ProcessPID, int64(r.PID))
		b.resources[r.PID] = res
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName(b.scopeName)
		sl.Scope().SetVersion(b.scopeVersion)
		records = sl.LogRecords()
		b.byPID[r.PID] = records
	}
	id := "unknown"
	if int(r.ProbeID) < len(b.probeIDs) {
		id = b.probeIDs[r.ProbeID]
	}
	start, end := b.clock.UnixNanos(r.StartNs), b.clock.UnixNanos(r.EndNs)
	lr := records.AppendEmpty()
	lr.Body().SetStr(id)
	lr.SetTimestamp(pcommon.Timestamp(end))
	lr.SetObservedTimestamp(observed)
	// The ids the profile samples taken inside the scope link to.
	lr.SetTraceID(pcommon.TraceID(r.TraceID))
	lr.SetSpanID(pcommon.SpanID(r.SpanID))
	attrs := lr.Attributes()
	attrs.EnsureCapacity(recordAttributeCount)
	attrs.PutStr(conventions.ProbeID, id)
	attrs.PutInt(conventions.DurationNs, int64(r.EndNs-r.StartNs))
	attrs.PutInt(conventions.StartTimeUnixNano, start)
	attrs.PutInt(conventions.EndTimeUnixNano, end)
	attrs.PutInt(conventions.ThreadID, int64(r.TID))
	attrs.PutStr(conventions.ThreadName, r.Comm)
	attrs.PutBool(conventions.IsMainThread, r.MainThread)
	attrs.PutInt(conventions.NestedCalls, int64(r.Nested))
	b.records++
}

// take returns the built logs, at now, and starts a new batch. The exec
// event that describes a process is handled on another goroutine and can
// come after the process's first records (a short process is gone by
// then, so /proc cannot tell): the records of a process not yet described
// wait for a later batch, up to describeWait, unless this batch is the
// last.
func (b *logBuilder) take(now time.Time, last bool) (plog.Logs, int) {
	wait := map[uint32]bool{}
	for pid, res := range b.resources {
		info := b.infos.Lookup(int(pid))
		if info.ExePath == "" && !last {
			since, held := b.heldSince[pid]
			if !held {
				b.heldSince[pid] = now
			}
			if !held || now.Sub(since) < describeWait {
				wait[pid] = true
				continue
			}
		}
		delete(b.heldSince, pid)
		if info.ExePath != "" {
			res.PutStr(conventions.ProcessExecutablePath, info.ExePath)
			res.PutStr(conventions.ProcessExecutableName, info.ExeName)
		}
		if info.ContainerID != "" {
			res.PutStr(conventions.ContainerID, info.ContainerID)
		}
	}
	logs, n := b.logs, b.records
	waiting := b.byPID
	b.reset()
	if len(wait) == 0 {
		return logs, n
	}
	logs.ResourceLogs().RemoveIf(func(rl plog.ResourceLogs) bool {
		pidValue, _ := rl.Resource().Attributes().Get(conventions.ProcessPID)
		pid := uint32(pidValue.Int())
		if !wait[pid] {
			return false
		}
		held := b.logs.ResourceLogs().AppendEmpty()
		rl.MoveTo(held)
		records := waiting[pid].Len()
		b.byPID[pid] = held.ScopeLogs().At(0).LogRecords()
		b.resources[pid] = held.Resource().Attributes()
		b.records += records
		n -= records
		return true
	})
	return logs, n
}
