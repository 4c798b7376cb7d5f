package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// benchSeconds is how long overhead benchmarks measure; BPFCOL_BENCH_SECONDS
// overrides the 60 s default.
func benchSeconds(b *testing.B) time.Duration {
	if s := os.Getenv("BPFCOL_BENCH_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("BPFCOL_BENCH_SECONDS=%q: want a positive number of seconds", s)
		}
		return time.Duration(n) * time.Second
	}
	return 60 * time.Second
}

// cpuTicks reads utime+stime of pid from /proc/PID/stat, in clock ticks.
func cpuTicks(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name may hold spaces: fields start after the last ')'.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

// warmUp covers bpfcol's first two 5 s reports, when it reads the symbol
// tables of every binary it samples.
const warmUp = 12 * time.Second

// overheadHz and overheadReport are the collector's sampling frequency and
// report interval in the overhead benchmarks.
const (
	overheadHz     = 20
	overheadReport = 5 * time.Second
)

// clockTicksPerSecond is USER_HZ, 100 on every Linux architecture we run on.
const clockTicksPerSecond = 100

// firstSampleLog matches the receiver's log line; zap writes durations as
// seconds.
var firstSampleLog = regexp.MustCompile(`first sample received.*"since_start": ([0-9.e+-]+)`)

// perfSamplesLine is perf record's summary on stderr.
var perfSamplesLine = regexp.MustCompile(`perf record: Captured and wrote .* \((\d+) samples\)`)

// perfRecordSamples reads the sample count from perf record's summary.
func perfRecordSamples(b *testing.B, stderr string) int64 {
	b.Helper()
	m := perfSamplesLine.FindStringSubmatch(stderr)
	if m == nil {
		b.Fatalf("no sample count in perf record's output:\n%s", stderr)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// BenchmarkCollectorOverhead measures, in one run and while two busy
// workloads keep both CPUs loaded, the CPU time of bin/bpfcol sampling at
// 20 Hz and of `perf record -a -g -F 20`, as a percentage of one core, and
// the time from starting bin/bpfcol to its first sample. It fails unless
// bin/bpfcol exported, to the OTLP server in the test, the samples of the
// window (see checkExported), naming the workloads' leaf function.
func BenchmarkCollectorOverhead(b *testing.B) {
	testenv.RequireBPF(b)
	perf, err := exec.LookPath("perf")
	if err != nil {
		b.Fatalf("perf (Debian package linux-perf) is needed as the peer: %v", err)
	}
	window := benchSeconds(b)
	hog := testworkload.BuildC(b, "cpuhog.c", "-O2", "-fno-omit-frame-pointer")
	var hogs []namedWork
	for i := range 2 {
		cmd := testworkload.Start(b, hog)
		hogs = append(hogs, namedWork{profiledWorkload{name: fmt.Sprintf("cpuhog%d", i), pids: pidSet(cmd.Process.Pid), chain: []string{"leaf"}}, true})
	}

	for b.Loop() {
		server := startProfilesServer(b)
		col := startCollector(b, strings.Replace(profilesConfig(server.addr), "sampling_frequency: 99\n    report_interval: 1s",
			fmt.Sprintf("sampling_frequency: %d\n    report_interval: %s", overheadHz, overheadReport), 1))
		var firstSample time.Duration
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if m := firstSampleLog.FindStringSubmatch(col.output.String()); m != nil {
				firstSample = time.Since(col.started)
				break
			}
		}
		if firstSample == 0 {
			b.Fatalf("no first sample logged within 30s:\n%s", col.output)
		}
		m := firstSampleLog.FindStringSubmatch(col.output.String())
		seconds, _ := strconv.ParseFloat(m[1], 64)
		sinceReceiverStart := time.Duration(seconds * float64(time.Second))

		perfCmd := exec.Command(perf, "record", "-a", "-g", "-F", strconv.Itoa(overheadHz), "-o", filepath.Join(b.TempDir(), "perf.data"), "--", "sleep", strconv.Itoa(int((window+warmUp).Seconds())+2))
		perfCmd.Stdout, perfCmd.Stderr = &lockedBuffer{}, &lockedBuffer{}
		if err := perfCmd.Start(); err != nil {
			b.Fatal(err)
		}
		// Both warm up first: bpfcol reads the symbol tables of the binaries
		// it sees at its first two reports, perf sets up its buffers. The
		// start-up cost is reported separately.
		time.Sleep(warmUp)
		colWarm := cpuTicks(b, col.cmd.Process.Pid)
		colStart, perfStart := colWarm, cpuTicks(b, perfCmd.Process.Pid)
		from, hostBefore := time.Now(), readCPUStat(b)
		time.Sleep(window)
		colTicks := cpuTicks(b, col.cmd.Process.Pid) - colStart
		perfTicks := cpuTicks(b, perfCmd.Process.Pid) - perfStart
		to, hostAfter := time.Now(), readCPUStat(b)
		// A collector that stalled would look cheap: it must have exported
		// the samples of the window.
		samples, share := checkExported(b, server, overheadHz, from, to, hostBefore, hostAfter, overheadReport)
		requireNamed(b, windowSamples(b, server, from, to), hogs)
		if err := perfCmd.Wait(); err != nil {
			b.Fatalf("perf record: %v\n%s", err, perfCmd.Stderr)
		}
		// The peer must have sampled too: perf records every CPU, idle or
		// not, over a run longer than the window, so at least the samples
		// of the window's busy time.
		perfSamples := perfRecordSamples(b, perfCmd.Stderr.(*lockedBuffer).String())
		if least := float64(overheadHz)*float64(hostAfter.busy-hostBefore.busy)/clockTicksPerSecond - float64(hostAfter.cpus); float64(perfSamples) < least {
			b.Fatalf("perf record captured %d samples, want at least %.0f", perfSamples, least)
		}

		pct := func(ticks int64) float64 {
			return 100 * float64(ticks) / clockTicksPerSecond / window.Seconds()
		}
		b.ReportMetric(float64(colWarm)*1000/clockTicksPerSecond, "bpfcol_startup_cpu_ms")
		b.ReportMetric(pct(colTicks), "bpfcol_%core")
		b.ReportMetric(pct(perfTicks), "perf_record_%core")
		b.ReportMetric(float64(firstSample.Milliseconds()), "first_sample_ms_from_exec")
		b.ReportMetric(float64(samples), "samples_exported")
		b.ReportMetric(share, "samples_exported/expected")
		b.ReportMetric(float64(perfSamples), "perf_record_samples")
		b.ReportMetric(float64(sinceReceiverStart.Microseconds())/1000, "first_sample_ms_from_receiver_start")
		b.Logf("over %s after %s of warm-up: bpfcol %.3f%% of a core, perf record %.3f%% (ratio %.1f); bpfcol used %d ms of CPU before; first sample %s after exec (%s after receiver start)",
			window, warmUp, pct(colTicks), pct(perfTicks), pct(colTicks)/max(pct(perfTicks), 0.001), colWarm*1000/clockTicksPerSecond, firstSample, sinceReceiverStart)
	}
}
