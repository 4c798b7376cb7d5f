package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// restartConfig runs both receivers: profiles and scope records of
// restartcalls' scoped, each to its OTLP server.
func restartConfig(bin, profiles, logs string) string {
	return fmt.Sprintf(`
receivers:
  ebpfprof:
    sampling_frequency: 99
    report_interval: 1s
  uprobe:
    probes:
      - id: call
        binary: %s
        entry: scoped
        exit: return
exporters:
  otlp_grpc/profiles:
    endpoint: %s
    tls:
      insecure: true
  otlp_grpc/logs:
    endpoint: %s
    tls:
      insecure: true
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprof]
      exporters: [otlp_grpc/profiles]
    logs:
      receivers: [uprobe]
      exporters: [otlp_grpc/logs]
`, bin, profiles, logs)
}

// TestCollectorRestartedOverRunningProcesses runs bin/bpfcol twice, stopped
// and started again, over processes that run throughout: a C program whose
// two threads keep probed calls under way, and a CPU hog. Each run stops
// cleanly and leaves no breakpoint in the probed code; the probed program
// runs on unharmed; each run records exactly the calls made while it ran
// (by the program's own clock), and profiles the hog's whole chain.
func TestCollectorRestartedOverRunningProcesses(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "restartcalls.c", "-O2", "-g", "-pthread")
	hog := testworkload.Start(t, testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...))
	dir := t.TempDir()
	start, stop, out, addrFile := filepath.Join(dir, "start"), filepath.Join(dir, "stop"), filepath.Join(dir, "out"), filepath.Join(dir, "addr")
	w := testworkload.Start(t, bin, start, stop, out, addrFile, "20")
	var fn uint64
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(addrFile)
		if _, err := fmt.Sscanf(string(b), "fn %v", &fn); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("restartcalls wrote no function address")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pid := int64(w.Process.Pid)

	type run struct {
		on, off int64      // CLOCK_MONOTONIC: the receivers started, SIGTERM sent
		records [][3]int64 // tid, start, end
		samples int64      // of the hog
		chains  int64      // of them with its whole chain
	}
	var runs []run
	for i := range 2 {
		profiles, logs := startProfilesServer(t), startLogsServer(t)
		col := startCollector(t, restartConfig(bin, profiles.addr, logs.addr))
		for !strings.Contains(col.output.String(), "uprobe receiver started") || !strings.Contains(col.output.String(), "ebpfprof receiver started") {
			if done, err := col.exited(); done {
				t.Fatalf("run %d: collector exited: %v\n%s", i, err, col.output)
			}
			if time.Now().After(deadline.Add(time.Duration(i+1) * 30 * time.Second)) {
				t.Fatalf("run %d: receivers did not start\n%s", i, col.output)
			}
			time.Sleep(20 * time.Millisecond)
		}
		on := int64(testworkload.MonotonicNow())
		time.Sleep(3 * time.Second)
		off := int64(testworkload.MonotonicNow())
		if err := col.stop(); err != nil {
			t.Fatalf("run %d: collector did not stop cleanly: %v\n%s", i, err, col.output)
		}
		if b := firstByteOf(t, int(pid), fn); b == 0xcc {
			t.Errorf("run %d: a breakpoint remains at the probed function after the collector stopped", i)
		}
		rn := run{on: on, off: off}
		offset := testworkload.MonotonicToUnix()
		for _, l := range logs.all() {
			for j := 0; j < l.ResourceLogs().Len(); j++ {
				rl := l.ResourceLogs().At(j)
				if p, ok := rl.Resource().Attributes().Get(conventions.ProcessPID); !ok || p.Int() != pid {
					continue
				}
				for k := 0; k < rl.ScopeLogs().Len(); k++ {
					recs := rl.ScopeLogs().At(k).LogRecords()
					for m := 0; m < recs.Len(); m++ {
						a := recs.At(m).Attributes()
						tid, _ := a.Get(conventions.ThreadID)
						s, _ := a.Get(conventions.StartTimeUnixNano)
						e, _ := a.Get(conventions.EndTimeUnixNano)
						rn.records = append(rn.records, [3]int64{tid.Int(), s.Int() - offset, e.Int() - offset})
					}
				}
			}
		}
		for _, p := range profiles.all() {
			for _, s := range pprofiletest.Samples(p) {
				if s.PID != int64(hog.Process.Pid) {
					continue
				}
				rn.samples += s.Count
				if s.HasChain([]string{"leaf", "middle", "main"}) {
					rn.chains += s.Count
				}
			}
		}
		runs = append(runs, rn)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var calls [][3]int64 // tid, start, end
	deadline = time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(out)
		if strings.HasSuffix(string(b), "done\n") {
			for _, line := range strings.Split(strings.TrimSuffix(string(b), "done\n"), "\n") {
				f := strings.Fields(line)
				if len(f) != 4 {
					continue
				}
				tid, _ := strconv.ParseInt(f[1], 10, 64)
				s, _ := strconv.ParseInt(f[2], 10, 64)
				e, _ := strconv.ParseInt(f[3], 10, 64)
				calls = append(calls, [3]int64{tid, s, e})
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("restartcalls did not finish")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("the probed program did not exit cleanly: %v", err)
	}
	const slack = int64(100 * time.Microsecond)
	for i, rn := range runs {
		inside, recorded := 0, 0
		for _, c := range calls {
			if c[1] < rn.on || c[2] > rn.off {
				continue
			}
			inside++
			n := 0
			for _, r := range rn.records {
				if r[0] == c[0] && r[1] >= c[1]-slack && r[2] <= c[2]+slack {
					n++
				}
			}
			if n == 1 {
				recorded++
			}
		}
		t.Logf("run %d: %d records; %d of %d calls made while it ran recorded once; %d of %d samples of the hog with leaf, middle, main", i, len(rn.records), recorded, inside, rn.chains, rn.samples)
		if inside < 100 || recorded != inside {
			t.Errorf("run %d: %d of %d calls made while it ran recorded exactly once", i, recorded, inside)
		}
		if rn.samples < 20 || rn.chains*100 < rn.samples*95 {
			t.Errorf("run %d: %d of %d samples of the hog carry leaf, middle, main, want at least 95%% of at least 20", i, rn.chains, rn.samples)
		}
	}
}

// firstByteOf reads the byte at addr in pid's memory: 0xcc is a uprobe's
// breakpoint.
func firstByteOf(t *testing.T, pid int, addr uint64) byte {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], int64(addr)); err != nil {
		t.Fatalf("reading pid %d at %#x: %v", pid, addr, err)
	}
	return b[0]
}
