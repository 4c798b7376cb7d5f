package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// soakMinutes is how long the soak runs; BPFCOL_SOAK_MINUTES overrides the
// 10 minute default.
func soakMinutes(b *testing.B) int {
	if s := os.Getenv("BPFCOL_SOAK_MINUTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("BPFCOL_SOAK_MINUTES=%q: want a positive number of minutes", s)
		}
		return n
	}
	return 10
}

// soakGrowthWindow is how many of the last minutes must not grow RSS by
// more than soakMaxGrowth.
const (
	soakGrowthWindow = 5
	soakMaxGrowth    = 0.05
)

// memStatus reads VmRSS and VmHWM of pid from /proc/PID/status, in bytes.
func memStatus(b *testing.B, pid int) (rss, hwm int64) {
	b.Helper()
	return procStatusKB(b, pid, "VmRSS") << 10, procStatusKB(b, pid, "VmHWM") << 10
}

// churn runs short processes until ctx ends, workers at a time: a C and a
// Go CPU hog, each from a fresh copy of its binary (a new file, as a
// deployment brings, with the same build id), and a pure-Python loop under
// python3. Each burns lifetime of CPU and exits. It counts what it started.
type churn struct {
	dir          string
	c, goBin, py string
	lifetime     time.Duration
	started      atomic.Int64
	seq          atomic.Int64 // names the binaries' copies
	mu           sync.Mutex
	pids         map[int64]time.Duration // CPU time each used, once it exited
	err          error
}

func (ch *churn) run(ctx context.Context, workers int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i++ {
				if err := ch.once(i); err != nil && ctx.Err() == nil {
					ch.mu.Lock()
					ch.err = err
					ch.mu.Unlock()
					return
				}
			}
		})
	}
	return &wg
}

func (ch *churn) once(i int) error {
	secs := strconv.FormatFloat(ch.lifetime.Seconds(), 'f', 3, 64)
	var cmd *exec.Cmd
	switch i % 3 {
	case 0, 1:
		src := ch.c
		if i%3 == 1 {
			src = ch.goBin
		}
		bin := filepath.Join(ch.dir, fmt.Sprintf("%s-%d", filepath.Base(src), ch.seq.Add(1)))
		if err := copyExecutable(src, bin); err != nil {
			return err
		}
		defer os.Remove(bin)
		cmd = exec.Command(bin, secs)
	default:
		cmd = exec.Command(ch.py, "-c", "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nn = 0\nwhile time.monotonic() < end:\n    n += 1\n", secs)
	}
	cmd, err := startRetryingBusy(cmd)
	if err != nil {
		return fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	ch.started.Add(1)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("running %s: %w", cmd.Path, err)
	}
	ch.mu.Lock()
	ch.pids[int64(cmd.Process.Pid)] = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	ch.mu.Unlock()
	return nil
}

// startRetryingBusy starts cmd, again while its binary is busy: a fork by
// another churn worker between this copy's write and its close holds the
// write descriptor until that child execs (ETXTBSY, golang/go#22315).
func startRetryingBusy(cmd *exec.Cmd) (*exec.Cmd, error) {
	for try := 0; ; try++ {
		err := cmd.Start()
		if err == nil || !errors.Is(err, syscall.ETXTBSY) || try == 100 {
			return cmd, err
		}
		time.Sleep(time.Millisecond)
		cmd = exec.Command(cmd.Path, cmd.Args[1:]...)
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// BenchmarkSoak runs bin/bpfcol (20 Hz, 5 s reports, exporting to an OTLP
// server in the test) for BPFCOL_SOAK_MINUTES (10) while short C, Go and
// Python processes start and exit continuously, three at a time. It
// records bin/bpfcol's VmRSS and VmHWM each minute and fails if RSS grew by
// more than 5% over the last five minutes (over all of them when the soak
// is shorter), if the collector did not export the samples of the soak,
// or if more of the churn's processes are missing from the profiles than
// their CPU time (each one's rusage) makes likely by chance.
func BenchmarkSoak(b *testing.B) {
	testenv.RequireBPF(b)
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Fatalf("python3 is needed for the churn: %v", err)
	}
	minutes := soakMinutes(b)
	ch := &churn{
		dir:      b.TempDir(),
		c:        testworkload.BuildC(b, "cpuhog.c", testworkload.CPUHogFlags()...),
		goBin:    testworkload.BuildGo(b, "gohog"),
		py:       py,
		lifetime: 300 * time.Millisecond,
		pids:     map[int64]time.Duration{},
	}

	for b.Loop() {
		server := startProfilesServer(b)
		cfg := strings.Replace(profilesConfig(server.addr), "sampling_frequency: 99\n    report_interval: 1s",
			fmt.Sprintf("sampling_frequency: %d\n    report_interval: %s", overheadHz, overheadReport), 1)
		// BPFCOL_SOAK_HEAP names a directory that receives the
		// collector's heap profile at the end of each minute
		// (heap-MM.pb.gz, and heap-MM.txt with the runtime's figures),
		// taken through the pprof extension; the size of each cache
		// (ebpfprof_cache_size) is logged with it.
		heapDir := os.Getenv("BPFCOL_SOAK_HEAP")
		pprofAddr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
		var metricsURL string
		if heapDir != "" {
			cfg = strings.Replace(cfg, "service:\n", fmt.Sprintf("extensions:\n  pprof:\n    endpoint: %s\nservice:\n  extensions: [pprof]\n", pprofAddr), 1)
			cfg, metricsURL = withPrometheus(b, cfg)
		}
		col := startCollector(b, cfg)
		pid := col.cmd.Process.Pid
		ctx, stop := context.WithCancel(context.Background())
		from, hostBefore := time.Now(), readCPUStat(b)
		wg := ch.run(ctx, 3)
		fine := sampleMemory(ctx, pid, soakSampleEvery)

		rss := make([]int64, minutes)
		var hwm int64
		for m := range minutes {
			select {
			case <-time.After(time.Until(from.Add(time.Duration(m+1) * time.Minute))):
			case err := <-col.done:
				col.done <- err
				stop()
				b.Fatalf("bin/bpfcol exited during the soak: %v\n%s", err, col.output)
			}
			rss[m], hwm = memStatus(b, pid)
			b.Logf("minute %d: VmRSS %.1f MiB (anonymous %.1f MiB, file %.1f MiB), VmHWM %.1f MiB, %d processes started; %s",
				m+1, mib(rss[m]), float64(procStatusKB(b, pid, "RssAnon"))/1024, float64(procStatusKB(b, pid, "RssFile"))/1024,
				mib(hwm), ch.started.Load(), fine.minute())
			if heapDir != "" {
				base := filepath.Join(heapDir, fmt.Sprintf("heap-%02d", m+1))
				fetchProfile(b, "http://"+pprofAddr+"/debug/pprof/heap", base+".pb.gz")
				fetchProfile(b, "http://"+pprofAddr+"/debug/pprof/heap?debug=1", base+".txt")
				logCacheSizes(b, metricsURL)
			}
		}
		to, hostAfter := time.Now(), readCPUStat(b)
		stop()
		wg.Wait()
		if heapDir != "" {
			if err := os.WriteFile(filepath.Join(heapDir, "rss.tsv"), fine.tsv(), 0o644); err != nil {
				b.Error(err)
			}
			if err := os.WriteFile(filepath.Join(heapDir, "collector.log"), []byte(col.output.String()), 0o644); err != nil {
				b.Error(err)
			}
		}
		if ch.err != nil {
			b.Fatalf("churn: %v", ch.err)
		}

		samples, share := checkExported(b, server, overheadHz, from, to, hostBefore, hostAfter, overheadReport)
		seen := exportedPIDs(server, ch.pids)
		missed, expectedMissed := processesMissed(ch.pids, seen, overheadHz)

		base := max(0, minutes-1-soakGrowthWindow)
		peak := rss[base]
		for _, r := range rss[base+1:] {
			peak = max(peak, r)
		}
		growth := float64(peak-rss[base]) / float64(rss[base])
		for m, r := range rss {
			b.ReportMetric(mib(r), fmt.Sprintf("rss_MiB_min%02d", m+1))
		}
		b.ReportMetric(mib(hwm), "hwm_MiB")
		b.ReportMetric(100*growth, "rss_growth_%")
		b.ReportMetric(float64(ch.started.Load()), "processes_started")
		b.ReportMetric(100*float64(len(seen))/float64(max(1, len(ch.pids))), "processes_in_profiles_%")
		b.ReportMetric(float64(missed), "processes_missed")
		b.ReportMetric(expectedMissed, "processes_missed_expected")
		b.ReportMetric(float64(samples), "samples_exported")
		b.ReportMetric(share, "samples_exported/expected")
		b.Logf("RSS from minute %d to %d: %.1f MiB -> peak %.1f MiB (%+.1f%%); high-water %.1f MiB; %d processes started, %d seen in the profiles (%d missed, %.1f expected by chance from their CPU time); load average %.2f",
			base+1, minutes, mib(rss[base]), mib(peak), 100*growth, mib(hwm), ch.started.Load(), len(seen), missed, expectedMissed, loadAverage())
		if allowed := expectedMissed + 3*math.Sqrt(expectedMissed) + 1; float64(missed) > allowed {
			b.Errorf("%d of %d churn processes never in the profiles; their CPU time at %d Hz makes %.1f expected by chance, at most %.0f allowed",
				missed, len(ch.pids), overheadHz, expectedMissed, math.Floor(allowed))
		}
		if minutes > 1 && growth > soakMaxGrowth {
			b.Errorf("RSS grew %.1f%% from minute %d to %d (%.1f -> %.1f MiB), more than %.0f%%",
				100*growth, base+1, minutes, mib(rss[base]), mib(peak), 100*soakMaxGrowth)
		}
	}
}

// soakSampleEvery is how often the soak reads the collector's memory
// between its minute marks: the per-minute figure is one instant, and the
// spread of the finer readings says how much of a change is noise.
const soakSampleEvery = 2 * time.Second

// memSample is one reading of /proc/PID/status, in kB.
type memSample struct {
	at                     time.Duration
	rss, anon, file, shmem int64
}

// memSampler reads a process's memory every interval until its context
// ends.
type memSampler struct {
	mu      sync.Mutex
	from    time.Time
	samples []memSample
	logged  int // samples already summarized by minute
}

func sampleMemory(ctx context.Context, pid int, every time.Duration) *memSampler {
	s := &memSampler{from: time.Now()}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			f, err := procStatus(pid)
			if err != nil {
				return
			}
			m := memSample{at: time.Since(s.from), rss: f["VmRSS"], anon: f["RssAnon"], file: f["RssFile"], shmem: f["RssShmem"]}
			s.mu.Lock()
			s.samples = append(s.samples, m)
			s.mu.Unlock()
		}
	}()
	return s
}

// minute summarizes the readings since the last call: the range of VmRSS,
// RssAnon and RssFile.
func (s *memSampler) minute() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	part := s.samples[s.logged:]
	s.logged = len(s.samples)
	if len(part) == 0 {
		return "no finer readings"
	}
	span := func(f func(memSample) int64) string {
		lo, hi := f(part[0]), f(part[0])
		for _, m := range part[1:] {
			lo, hi = min(lo, f(m)), max(hi, f(m))
		}
		return fmt.Sprintf("%.1f-%.1f", float64(lo)/1024, float64(hi)/1024)
	}
	return fmt.Sprintf("%d readings: VmRSS %s MiB, anonymous %s, file %s",
		len(part), span(func(m memSample) int64 { return m.rss }),
		span(func(m memSample) int64 { return m.anon }), span(func(m memSample) int64 { return m.file }))
}

// tsv is every reading: seconds, VmRSS, RssAnon, RssFile, RssShmem (kB).
func (s *memSampler) tsv() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out strings.Builder
	out.WriteString("seconds\tvmrss_kb\trssanon_kb\trssfile_kb\trssshmem_kb\n")
	for _, m := range s.samples {
		fmt.Fprintf(&out, "%.1f\t%d\t%d\t%d\t%d\n", m.at.Seconds(), m.rss, m.anon, m.file, m.shmem)
	}
	return []byte(out.String())
}

// logCacheSizes logs the receiver's ebpfprof_cache_size series, one
// cache=value pair each.
func logCacheSizes(b *testing.B, url string) {
	series, err := scrape(b, url)
	if err != nil {
		b.Logf("scraping the self-metrics: %v", err)
		return
	}
	re := regexp.MustCompile(`^otelcol_ebpfprof_cache_size\{.*cache="([a-z_]+)"`)
	var sizes []string
	for s, v := range series {
		if m := re.FindStringSubmatch(s); m != nil {
			sizes = append(sizes, fmt.Sprintf("%s=%.0f", m[1], v))
		}
	}
	slices.Sort(sizes)
	b.Logf("caches: %s", strings.Join(sizes, " "))
}

// exportedPIDs returns the pids among want that appear in a received
// profile.
func exportedPIDs(s *profilesServer, want map[int64]time.Duration) map[int64]bool {
	seen := map[int64]bool{}
	for _, p := range s.all() {
		for i := 0; i < p.ResourceProfiles().Len(); i++ {
			if v, ok := p.ResourceProfiles().At(i).Resource().Attributes().Get("process.pid"); ok {
				if _, churned := want[v.Int()]; churned {
					seen[v.Int()] = true
				}
			}
		}
	}
	return seen
}

// processesMissed counts the processes of cpu (pid -> CPU time used) not
// in seen, and how many a sampler at hz per CPU misses by chance: a
// process that ran c of CPU time in slices escapes every tick with
// probability at most exp(-c·hz) (at most one tick lands in a slice
// shorter than the period, each with probability its length over the
// period; a slice as long as the period always has one).
func processesMissed(cpu map[int64]time.Duration, seen map[int64]bool, hz int) (missed int, expected float64) {
	for pid, c := range cpu {
		expected += math.Exp(-c.Seconds() * float64(hz))
		if !seen[pid] {
			missed++
		}
	}
	return missed, expected
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }
