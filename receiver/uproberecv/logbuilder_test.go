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
// event has not been handled yet wait, batch after batch, and carry its
// executable once the event described it; a process never described goes
// out once it waited describeWait, and nothing waits in the last batch.
func TestLogBuilderWaitsForExecEvent(t *testing.T) {
	// Pids above pid_max: /proc never describes them, only Put does.
	const described, never, known = 1 << 30, 1<<30 + 1, 1<<30 + 2
	infos := process.NewInfoCache(16)
	infos.Put(known, process.Info{ExePath: "/usr/bin/known", ExeName: "known"})
	b := newLogBuilder("scope", "v", []string{"p"}, ktime.New(), infos)
	start := time.Unix(1e9, 0)
	now := pcommon.NewTimestampFromTime(start)
	for _, pid := range []uint32{described, never, known} {
		b.add(&scopeprobe.Record{PID: pid, StartNs: 1, EndNs: 2}, now)
	}

	first, n := b.take(start, false)
	if got := exePaths(first); n != 1 || len(got) != 1 || got[known] != "/usr/bin/known" {
		t.Fatalf("first batch: %d records, %v; want only the known process, described", n, got)
	}
	if b.records != 2 {
		t.Fatalf("%d records wait, want 2", b.records)
	}
	// A later batch within describeWait: both still wait.
	if _, n := b.take(start.Add(describeWait/2), false); n != 0 || b.records != 2 {
		t.Fatalf("a batch %v later handed on %d records, %d wait; want 0 and 2", describeWait/2, n, b.records)
	}

	// The exec event arrives; a new record of the waiting process joins it.
	infos.Put(described, process.Info{ExePath: "/usr/bin/late", ExeName: "late"})
	b.add(&scopeprobe.Record{PID: described, StartNs: 3, EndNs: 4}, now)
	second, n := b.take(start.Add(describeWait*3/4), false)
	if got := exePaths(second); n != 2 || len(got) != 1 || got[described] != "/usr/bin/late" {
		t.Fatalf("second batch: %d records, %v; want the 2 of the described process", n, got)
	}
	third, n := b.take(start.Add(describeWait), false)
	if got := exePaths(third); n != 1 || len(got) != 1 || got[never] != "" {
		t.Fatalf("batch after describeWait: %d records, %v; want the 1 of the process never described", n, got)
	}

	b.add(&scopeprobe.Record{PID: never + 10, StartNs: 5, EndNs: 6}, now)
	if last, n := b.take(start.Add(describeWait), true); n != 1 || last.LogRecordCount() != 1 {
		t.Fatalf("last batch held %d of its records back", 1-n)
	}
}
