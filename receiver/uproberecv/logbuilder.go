package uproberecv

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/conventions"
)

// Attribute keys of a scope record.
const (
	attrProbeID      = conventions.ProbeID
	attrDurationNs   = conventions.DurationNs
	attrStartUnixNs  = conventions.StartTimeUnixNano
	attrEndUnixNs    = conventions.EndTimeUnixNano
	attrThreadID     = conventions.ThreadID
	attrThreadName   = conventions.ThreadName
	attrIsMainThread = conventions.IsMainThread
	attrNestedCalls  = conventions.NestedCalls

	attrProcessPID       = conventions.ProcessPID
	attrExecutablePath   = conventions.ProcessExecutablePath
	attrExecutableName   = conventions.ProcessExecutableName
	attrContainerID      = conventions.ContainerID
	recordAttributeCount = 8
)

// logBuilder groups records by process into one plog.Logs.
type logBuilder struct {
	scopeName    string
	scopeVersion string
	probeIDs     []string
	clock        *ktimeClock
	infos        *processInfos

	logs    plog.Logs
	byPID   map[uint32]plog.LogRecordSlice
	records int
}

func newLogBuilder(scopeName, scopeVersion string, probeIDs []string, clock *ktimeClock, infos *processInfos) *logBuilder {
	b := &logBuilder{scopeName: scopeName, scopeVersion: scopeVersion, probeIDs: probeIDs, clock: clock, infos: infos}
	b.reset()
	return b
}

func (b *logBuilder) reset() {
	b.logs = plog.NewLogs()
	b.byPID = map[uint32]plog.LogRecordSlice{}
	b.records = 0
}

// add appends one record, read at observed.
func (b *logBuilder) add(r *scopeprobe.Record, observed pcommon.Timestamp) {
	records, ok := b.byPID[r.PID]
	if !ok {
		rl := b.logs.ResourceLogs().AppendEmpty()
		res := rl.Resource().Attributes()
		res.PutInt(attrProcessPID, int64(r.PID))
		info := b.infos.lookup(int(r.PID))
		if info.exePath != "" {
			res.PutStr(attrExecutablePath, info.exePath)
			res.PutStr(attrExecutableName, info.exeName)
		}
		if info.containerID != "" {
			res.PutStr(attrContainerID, info.containerID)
		}
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
	start, end := b.clock.unixNanos(r.StartNs), b.clock.unixNanos(r.EndNs)
	lr := records.AppendEmpty()
	lr.Body().SetStr(id)
	lr.SetTimestamp(pcommon.Timestamp(end))
	lr.SetObservedTimestamp(observed)
	attrs := lr.Attributes()
	attrs.EnsureCapacity(recordAttributeCount)
	attrs.PutStr(attrProbeID, id)
	attrs.PutInt(attrDurationNs, int64(r.EndNs-r.StartNs))
	attrs.PutInt(attrStartUnixNs, start)
	attrs.PutInt(attrEndUnixNs, end)
	attrs.PutInt(attrThreadID, int64(r.TID))
	attrs.PutStr(attrThreadName, r.Comm)
	attrs.PutBool(attrIsMainThread, r.MainThread)
	attrs.PutInt(attrNestedCalls, int64(r.Nested))
	b.records++
}

// take returns the built logs and starts a new batch.
func (b *logBuilder) take() (plog.Logs, int) {
	logs, n := b.logs, b.records
	b.reset()
	return logs, n
}
