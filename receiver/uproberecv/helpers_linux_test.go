package uproberecv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

// scopeLog is one received log record, flattened.
type scopeLog struct {
	probe               string
	body                string
	pid, tid            int64
	durationNs          int64
	startUnix, endUnix  int64
	timestamp, observed pcommon.Timestamp
	nested              int64
	isMain              bool
	threadName          string
	exePath, exeName    string
}

func flatten(sink *consumertest.LogsSink) []scopeLog {
	var out []scopeLog
	for _, logs := range sink.AllLogs() {
		for i := 0; i < logs.ResourceLogs().Len(); i++ {
			rl := logs.ResourceLogs().At(i)
			res := rl.Resource().Attributes()
			pid, _ := res.Get(conventions.ProcessPID)
			path, _ := res.Get(conventions.ProcessExecutablePath)
			name, _ := res.Get(conventions.ProcessExecutableName)
			for j := 0; j < rl.ScopeLogs().Len(); j++ {
				recs := rl.ScopeLogs().At(j).LogRecords()
				for k := 0; k < recs.Len(); k++ {
					lr := recs.At(k)
					a := lr.Attributes()
					get := func(key string) pcommon.Value { v, _ := a.Get(key); return v }
					out = append(out, scopeLog{
						probe:      get(conventions.ProbeID).Str(),
						body:       lr.Body().Str(),
						pid:        pid.Int(),
						tid:        get(conventions.ThreadID).Int(),
						durationNs: get(conventions.DurationNs).Int(),
						startUnix:  get(conventions.StartTimeUnixNano).Int(),
						endUnix:    get(conventions.EndTimeUnixNano).Int(),
						timestamp:  lr.Timestamp(),
						observed:   lr.ObservedTimestamp(),
						nested:     get(conventions.NestedCalls).Int(),
						isMain:     get(conventions.IsMainThread).Bool(),
						threadName: get(conventions.ThreadName).Str(),
						exePath:    path.Str(),
						exeName:    name.Str(),
					})
				}
			}
		}
	}
	return out
}

// startReceiver starts a uprobe receiver on cfg; it is shut down at cleanup
// unless the test did it.
func startReceiver(t testing.TB, cfg *Config, opts options) (*logsReceiver, *consumertest.LogsSink) {
	t.Helper()
	r, sink, _ := startReceiverWithTelemetry(t, cfg, opts)
	return r, sink
}

// startReceiverWithTelemetry is startReceiver with its self-metrics read
// from the returned Telemetry.
func startReceiverWithTelemetry(t testing.TB, cfg *Config, opts options) (*logsReceiver, *consumertest.LogsSink, *componenttest.Telemetry) {
	t.Helper()
	testenv.RequireBPF(t)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sink := new(consumertest.LogsSink)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	if os.Getenv("BPFCOL_TEST_LOG") != "" {
		// The receiver's log, to see why a test fails.
		set.Logger = zaptest.NewLogger(t)
	}
	r, err := newLogsReceiver(set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	r.opts = opts
	if err := r.Start(context.Background(), componentHost{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return r, sink, tel
}

type componentHost struct{}

func (componentHost) GetExtensions() map[component.ID]component.Component { return nil }

// fileIDOf returns the identity of the file at path.
func fileIDOf(t testing.TB, path string) process.FileID {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := process.FileIDOf(fi)
	if !ok {
		t.Fatal("no stat identity")
	}
	return f
}

// keyOf returns the negative cache key (device, inode) of path.
func keyOf(t testing.TB, path string) process.FileKey {
	t.Helper()
	return fileIDOf(t, path).FileKey
}

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readOutput waits for the workload to write its final "done" line and
// returns the lines before it.
func readOutput(t testing.TB, path string, timeout time.Duration) []string {
	t.Helper()
	var lines []string
	ok := waitFor(timeout, func() bool {
		f, err := os.Open(path)
		if err != nil {
			return false
		}
		defer f.Close()
		lines = lines[:0]
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if sc.Text() == "done" {
				return true
			}
			lines = append(lines, sc.Text())
		}
		return false
	})
	if !ok {
		t.Fatalf("workload did not finish within %s (%d lines)", timeout, len(lines))
	}
	return lines
}

func fields(t testing.TB, line string, n int) []int64 {
	t.Helper()
	parts := strings.Fields(line)
	if len(parts) != n+1 {
		t.Fatalf("bad workload line %q", line)
	}
	out := make([]int64, n)
	for i := range n {
		v, err := strconv.ParseInt(parts[i+1], 10, 64)
		if err != nil {
			t.Fatalf("bad workload line %q: %v", line, err)
		}
		out[i] = v
	}
	return out
}

// touch creates the workload's start file.
func touch(t testing.TB, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// makeFIFO makes every thread of pid SCHED_FIFO, so that no ordinary task
// on a busy host preempts it; threads it creates later inherit the policy
// from their creator. It loops until a pass finds every thread set, as a
// thread may be created meanwhile by one not set yet.
func makeFIFO(t testing.TB, pid int) {
	t.Helper()
	fifo := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}
	for {
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			t.Fatalf("listing the threads of pid %d: %v", pid, err)
		}
		set := 0
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			if a, err := unix.SchedGetAttr(tid, 0); err == nil && a.Policy == unix.SCHED_FIFO {
				continue
			}
			if err := unix.SchedSetAttr(tid, fifo, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				t.Fatalf("making thread %d of pid %d SCHED_FIFO: %v", tid, pid, err)
			}
			set++
		}
		if set == 0 {
			return
		}
	}
}

func tempPaths(t testing.TB) (start, out string) {
	dir := t.TempDir()
	return filepath.Join(dir, "start"), filepath.Join(dir, "out")
}

// linksOf lists the BPF links in the kernel whose program is one of ids.
func linksOf(t testing.TB, ids []ebpf.ProgramID) int {
	t.Helper()
	want := map[ebpf.ProgramID]bool{}
	for _, id := range ids {
		want[id] = true
	}
	n := 0
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue
		}
		if want[info.Program] {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// openFDs lists this process's open file descriptors, each with what it
// opens.
func openFDs(t testing.TB) map[string]string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	fds := map[string]string{}
	for _, e := range entries {
		// One closed since the listing reads as an empty target.
		fds[e.Name()], _ = os.Readlink("/proc/self/fd/" + e.Name())
	}
	return fds
}

// leakedFDs are the descriptors open in after that were not, to the same
// file, in before. One that another goroutine of the test binary closed
// meanwhile (a workload's pidfd or pipe, released late) is not a leak,
// and hides none.
func leakedFDs(before, after map[string]string) []string {
	var leaked []string
	for fd, target := range after {
		if was, ok := before[fd]; !ok || was != target {
			leaked = append(leaked, fd+" -> "+target)
		}
	}
	slices.Sort(leaked)
	return leaked
}

// discoveryState describes what the tracker did about lib, and the
// process watcher's counts: a test that recorded nothing says why.
func discoveryState(t testing.TB, r *logsReceiver, lib string) string {
	t.Helper()
	st := &r.tracker.stats
	c, err := r.watcher.Counters()
	pc, perr := r.probes.Counters()
	n, p50, p99 := r.tracker.latency.percentiles(triggerMapping)
	return fmt.Sprintf("%s attached %v; scans %d, evaluations %d, negative hits %d, mappings unnamed %d, exited before attach %d, binaries attached %d detached %d; mapping to attach latency n=%d p50 %s p99 %s; watcher events %d lost %d (%v); probes %+v (%v)",
		filepath.Base(lib), r.tracker.isAttached(keyOf(t, lib)), st.scans.Load(), st.evaluations.Load(), st.negativeHits.Load(),
		st.mappingsUnnamed.Load(), st.exitedBeforeAttach.Load(), st.attached.Load(), st.detached.Load(), n, p50, p99, c.Events, c.LostRingbuf, err, pc, perr)
}

// programRuns describes how often each of the receiver's scope programs
// ran and missed a run by recursion (counted while stats are enabled).
func programRuns(r *logsReceiver) string {
	ids, err := r.probes.ProgramIDs()
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, id := range ids {
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%d: %v", id, err))
			continue
		}
		st, err := prog.Stats()
		var maps []ebpf.MapID
		if info, ierr := prog.Info(); ierr == nil {
			maps, _ = info.MapIDs()
		}
		prog.Close()
		if err != nil {
			parts = append(parts, fmt.Sprintf("%d: %v", id, err))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d ran %d missed %d maps %v", id, st.RunCount, st.RecursionMisses, maps))
	}
	return strings.Join(parts, ", ")
}
