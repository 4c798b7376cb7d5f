package uproberecv

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/process"
)

// exePaths returns the executable path of each pid's resource in logs, ""
// for a resource without one.
func exePaths(logs plog.Logs) map[int64]string {
	out := map[int64]string{}
	for i := 0; i < logs.ResourceLogs().Len(); i++ {
		attrs := logs.ResourceLogs().At(i).Resource().Attributes()
		pid, _ := attrs.Get(conventions.ProcessPID)
		path, _ := attrs.Get(conventions.ProcessExecutablePath)
		out[pid.Int()] = path.Str()
	}
	return out
}

// TestLogBuilderWaitsForExecEvent: the records of a process whose exec
// event has not been handled yet wait one batch, and carry its executable
// once the event described it; a process never described goes out after
// that one wait, and nothing waits in the last batch.
func TestLogBuilderWaitsForExecEvent(t *testing.T) {
	// Pids above pid_max: /proc never describes them, only Put does.
	const described, never, known = 1 << 30, 1<<30 + 1, 1<<30 + 2
	infos := process.NewInfoCache(16)
	infos.Put(known, process.Info{ExePath: "/usr/bin/known", ExeName: "known"})
	b := newLogBuilder("scope", "v", []string{"p"}, ktime.New(), infos)
	now := pcommon.NewTimestampFromTime(time.Unix(1e9, 0))
	for _, pid := range []uint32{described, never, known} {
		b.add(&scopeprobe.Record{PID: pid, StartNs: 1, EndNs: 2}, now)
	}

	first, n := b.take(false)
	if got := exePaths(first); n != 1 || len(got) != 1 || got[known] != "/usr/bin/known" {
		t.Fatalf("first batch: %d records, %v; want only the known process, described", n, got)
	}
	if b.records != 2 {
		t.Fatalf("%d records wait, want 2", b.records)
	}

	// The exec event arrives; a new record of the waiting process joins it.
	infos.Put(described, process.Info{ExePath: "/usr/bin/late", ExeName: "late"})
	b.add(&scopeprobe.Record{PID: described, StartNs: 3, EndNs: 4}, now)
	second, n := b.take(false)
	got := exePaths(second)
	if n != 3 || got[described] != "/usr/bin/late" || got[never] != "" || len(got) != 2 {
		t.Fatalf("second batch: %d records, %v; want 3 records of both waiting processes", n, got)
	}

	b.add(&scopeprobe.Record{PID: never + 10, StartNs: 5, EndNs: 6}, now)
	if last, n := b.take(true); n != 1 || last.LogRecordCount() != 1 {
		t.Fatalf("last batch held %d of its records back", 1-n)
	}
}
