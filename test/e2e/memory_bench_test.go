package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// memoryBenchDurations returns the warm-up and the measured window of the
// memory benchmarks: 15 s and 40 s, or BPFCOL_MEMBENCH_WARMUP and
// BPFCOL_MEMBENCH_SECONDS (seconds).
func memoryBenchDurations(b *testing.B) (warm, window time.Duration) {
	get := func(env string, def int) time.Duration {
		s := os.Getenv(env)
		if s == "" {
			return time.Duration(def) * time.Second
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number of seconds", env, s)
		}
		return time.Duration(n) * time.Second
	}
	return get("BPFCOL_MEMBENCH_WARMUP", 15), get("BPFCOL_MEMBENCH_SECONDS", 40)
}

// procStatus reads the "Name:   N kB" fields of /proc/PID/status, in kB.
func procStatus(pid int) (map[string]int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	fields := make(map[string]int64)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasSuffix(v, " kB") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, " kB")), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parsing %s of pid %d: %w", name, pid, err)
		}
		fields[name] = n
	}
	return fields, nil
}

// procStatusKB reads a "Name:   N kB" field of /proc/PID/status.
func procStatusKB(b *testing.B, pid int, field string) int64 {
	b.Helper()
	fields, err := procStatus(pid)
	if err != nil {
		b.Fatal(err)
	}
	n, ok := fields[field]
	if !ok {
		b.Fatalf("no %s in /proc/%d/status", field, pid)
	}
	return n
}

// loadAverage is the 1-minute load average, reported beside the figures:
// other processes on the host change the CPU share.
func loadAverage() float64 {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// fourWorkloads are the four usual workloads of the memory and overhead
// goals, running.
type fourWorkloads struct {
	c, goHog, python *exec.Cmd
	// xz is the shell loop running `xz -6`; it prints each xz's pid.
	xz *shellLoop
}

// memoryWorkloads starts the four workloads of the memory goals: the C
// frame-pointer chain, the Go chain, a pure-Python loop (leaf called by
// middle) under Debian's python3.11 and `xz -6` compressing generated
// data, one xz after the other.
func memoryWorkloads(b testing.TB) *fourWorkloads {
	b.Helper()
	for _, p := range []string{"/usr/bin/python3.11", "xz"} {
		if _, err := exec.LookPath(p); err != nil {
			b.Fatalf("%s is needed by the memory benchmark (scripts/install-deps.sh installs it): %v", p, err)
		}
	}
	cHog := testworkload.BuildC(b, "cpuhog.c", testworkload.CPUHogFlags()...)
	goHog := testworkload.BuildGo(b, "gohog")
	script := filepath.Join(b.TempDir(), "loop.py")
	writeFile(b, script, "def leaf(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n\ndef middle():\n    return leaf(20000)\n\nwhile True:\n    middle()\n")
	return &fourWorkloads{
		c:      testworkload.Start(b, cHog),
		goHog:  testworkload.Start(b, goHog),
		python: testworkload.Start(b, "/usr/bin/python3.11", script),
		xz:     startShellLoop(b, xzLoop, xzInput(b, 24<<20)),
	}
}

// xzLoop is the body of a shell loop compressing the file $1 with
// `xz -6`, one process at a time, printing each one's pid.
const xzLoop = `xz -6 -T1 -c "$1" >/dev/null & echo $!; wait $!`

// xzInput writes size bytes of text-like data, which compresses at xz's
// usual pace: words drawn from a small vocabulary, with random numbers
// between them. It returns the file's path.
func xzInput(b testing.TB, size int) string {
	b.Helper()
	var buf bytes.Buffer
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("profile sample frame stack kernel user binary symbol table address mapping process thread report interval memory")
	for buf.Len() < size {
		fmt.Fprintf(&buf, "%s %d ", words[rng.IntN(len(words))], rng.IntN(1<<20))
	}
	data := filepath.Join(b.TempDir(), "data.txt")
	writeFile(b, data, buf.String())
	return data
}

func writeFile(b testing.TB, path, content string) {
	b.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
}

// largeBinaries starts the three large binaries of the second variant:
// a copy of bpfcol built with DWARF (≥ 30 MB) running a small profiling
// config, node running a busy loop, and a C++ program with large DWARF.
// It returns the functions each runs in: the Go copy's goroutines start in
// runtime.goexit, node's main thread in node::Start, the C++ loop calls
// step.
func largeBinaries(b *testing.B) []namedWork {
	b.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		b.Fatalf("node is needed by the memory benchmark: %v", err)
	}
	dir := b.TempDir()

	// ocb strips bin/bpfcol; build its generated sources again with DWARF.
	src := filepath.Join(repoRoot(b), "_build")
	if _, err := os.Stat(filepath.Join(src, "main.go")); err != nil {
		b.Fatalf("%s holds no ocb sources: run `make build` first: %v", src, err)
	}
	big := filepath.Join(dir, "bpfcol-dwarf")
	build := exec.Command("go", "build", "-o", big, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building bpfcol with DWARF: %v\n%s", err, out)
	}
	if fi, err := os.Stat(big); err != nil || fi.Size() < 30<<20 {
		b.Fatalf("bpfcol with DWARF: want ≥ 30 MB, got %v (%v)", fi, err)
	}
	cfg := filepath.Join(dir, "small.yaml")
	writeFile(b, cfg, fmt.Sprintf(`
receivers:
  ebpfprof:
    sampling_frequency: 499
    report_interval: 1s
exporters:
  pprof:
    directory: %s
    max_files: 2
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprof]
      exporters: [pprof]
`, b.TempDir()))
	goCopy := testworkload.Start(b, big, "--config", cfg)

	nodeCmd := testworkload.Start(b, node, "-e", "function leaf(n){let s=0;for(let i=0;i<n;i++)s+=i*i;return s}\nfunction middle(){return leaf(100000)}\nfor(;;)middle()")

	cpp := filepath.Join(dir, "bigdwarf.cpp")
	writeFile(b, cpp, bigDWARFSource(120))
	bin := filepath.Join(dir, "bigdwarf")
	if out, err := exec.Command("g++", "-O1", "-g", "-fno-omit-frame-pointer", "-o", bin, cpp).CombinedOutput(); err != nil {
		b.Fatalf("building the C++ workload: %v\n%s", err, out)
	}
	cppCmd := testworkload.Start(b, bin)
	return []namedWork{
		{profiledWorkload{name: "bpfcol_dwarf", pids: pidSet(goCopy.Process.Pid), chain: []string{"runtime.goexit"}}, false},
		{profiledWorkload{name: "node", pids: pidSet(nodeCmd.Process.Pid), thread: mainThread, chain: []string{"node::Start"}}, false},
		{profiledWorkload{name: "bigdwarf", pids: pidSet(cppCmd.Process.Pid), chain: []string{"step"}}, true},
	}
}

// bigDWARFSource is a C++ program whose DWARF is large: n instantiations of
// templates over the standard containers, strings, streams and regex, all
// called from a busy loop.
func bigDWARFSource(n int) string {
	var s strings.Builder
	s.WriteString(`#include <map>
#include <numeric>
#include <unordered_map>
#include <vector>
#include <string>
#include <sstream>
#include <regex>
#include <functional>
#include <algorithm>
template <int N> struct Work {
  std::map<std::string, std::vector<long>> m;
  std::unordered_map<long, std::string> u;
  __attribute__((noinline)) long run(long k) {
    std::ostringstream os;
    os << "key" << (k % 13) << '-' << N;
    auto &v = m[os.str()];
    v.push_back(k * N);
    if (v.size() > 64) v.erase(v.begin(), v.begin() + 32);
    u[k % 97] = os.str();
    std::function<long(long)> f = [&](long x) { return x + (long)u.size() + (long)v.size(); };
    return std::accumulate(v.begin(), v.end(), f(k));
  }
};
static std::regex re("k(e+)y([0-9]+)");
`)
	s.WriteString("long total;\n__attribute__((noinline)) void step(long k) {\n")
	for i := range n {
		fmt.Fprintf(&s, "  { static Work<%d> w; total += w.run(k); }\n", i)
	}
	s.WriteString("  std::smatch sm; std::string t = \"key\" + std::to_string(k);\n  if (std::regex_search(t, sm, re)) total += sm.size();\n}\nint main() { for (long k = 0;; k++) step(k); }\n")
	return s.String()
}

// BenchmarkCollectorMemory runs bin/bpfcol at 20 Hz with 5 s reports while
// the four workloads of the memory goals run, and reports its RSS (mean over
// the window and at its end), its high-water mark, and its CPU use as a
// percentage of one core over the window, after the warm-up. The variant
// large_binaries adds three large binaries to name. Each run fails unless
// the collector exported the samples the busy CPUs yield at 20 Hz over the
// window (checkExported) and named the function each workload runs in
// (requireNamed).
func BenchmarkCollectorMemory(b *testing.B) {
	testenv.RequireBPF(b)
	for _, large := range []bool{false, true} {
		name := "four_workloads"
		if large {
			name = "large_binaries"
		}
		b.Run(name, func(b *testing.B) {
			four := memoryWorkloads(b)
			work := []namedWork{
				{profiledWorkload{name: "c", pids: pidSet(four.c.Process.Pid), chain: []string{"leaf"}}, true},
				{profiledWorkload{name: "go", pids: pidSet(four.goHog.Process.Pid), chain: []string{"main.leaf"}}, true},
				{profiledWorkload{name: "py311", pids: pidSet(four.python.Process.Pid), chain: []string{"_PyEval_EvalFrameDefault"}}, true},
				{profiledWorkload{name: "xz", pids: four.xz.pids, chain: []string{"lzma_code"}}, true},
			}
			if large {
				work = append(work, largeBinaries(b)...)
			}
			for b.Loop() {
				measureMemory(b, work)
			}
		})
	}
}

func measureMemory(b *testing.B, work []namedWork) {
	warm, window := memoryBenchDurations(b)
	server := startProfilesServer(b)
	cfg := strings.Replace(profilesConfig(server.addr), "sampling_frequency: 99\n    report_interval: 1s", "sampling_frequency: 20\n    report_interval: 5s", 1)
	// BPFCOL_MEMBENCH_HEAP names a file that receives, suffixed with the
	// benchmark's name, the collector's heap profile at the end of the
	// window, taken through the pprof extension.
	heapFile := os.Getenv("BPFCOL_MEMBENCH_HEAP")
	if heapFile != "" {
		heapFile += "." + strings.ReplaceAll(b.Name(), "/", "_")
	}
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	if heapFile != "" {
		cfg = strings.Replace(cfg, "service:\n", fmt.Sprintf("extensions:\n  pprof:\n    endpoint: %s\nservice:\n  extensions: [pprof]\n", pprofAddr), 1)
	}
	col := startCollector(b, cfg)
	pid := col.cmd.Process.Pid

	var firstSample time.Duration
	var startupTicks int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if firstSampleLog.MatchString(col.output.String()) {
			firstSample = time.Since(col.started)
			startupTicks = cpuTicks(b, pid)
			break
		}
	}
	if firstSample == 0 {
		b.Fatalf("no first sample logged within 30s:\n%s", col.output)
	}
	time.Sleep(max(warm-time.Since(col.started), 0))
	startTicks := cpuTicks(b, pid)
	from, hostBefore := time.Now(), readCPUStat(b)
	var rss []int64
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		rss = append(rss, procStatusKB(b, pid, "VmRSS"))
		time.Sleep(time.Second)
	}
	ticks := cpuTicks(b, pid) - startTicks
	to, hostAfter := time.Now(), readCPUStat(b)
	rss = append(rss, procStatusKB(b, pid, "VmRSS"))
	hwm := procStatusKB(b, pid, "VmHWM")
	// What the RSS is: the heap and stacks (anonymous), or pages of mapped
	// files (the binary itself, and the symbol tables read in place).
	anon, file := procStatusKB(b, pid, "RssAnon"), procStatusKB(b, pid, "RssFile")
	logLargestMappings(b, pid)
	if heapFile != "" {
		fetchProfile(b, "http://"+pprofAddr+"/debug/pprof/heap", heapFile)
		// The runtime's own figures (heap in use, released, stacks, GC
		// goal) come with the text form of the profile.
		fetchProfile(b, "http://"+pprofAddr+"/debug/pprof/heap?debug=1", heapFile+".txt")
	}
	load := loadAverage()
	// Real work: the collector exported the samples of the window, and
	// named what each workload runs.
	exported, _ := checkExported(b, server, 20, from, to, hostBefore, hostAfter, 5*time.Second)
	requireNamed(b, windowSamples(b, server, from, to), work)
	if err := col.stop(); err != nil {
		b.Fatalf("collector did not stop cleanly: %v\n%s", err, col.output)
	}

	mean := int64(0)
	for _, v := range rss {
		mean += v
	}
	mean /= int64(len(rss))
	mb := func(kb int64) float64 { return float64(kb) / 1024 }
	pct := 100 * float64(ticks) / clockTicksPerSecond / window.Seconds()
	b.ReportMetric(mb(mean), "rss_mean_MB")
	b.ReportMetric(mb(rss[len(rss)-1]), "rss_end_MB")
	b.ReportMetric(mb(slices.Max(rss)), "rss_max_MB")
	b.ReportMetric(mb(hwm), "hwm_MB")
	b.ReportMetric(mb(anon), "rss_anon_end_MB")
	b.ReportMetric(mb(file), "rss_file_end_MB")
	b.ReportMetric(pct, "%core")
	b.ReportMetric(float64(startupTicks)*1000/clockTicksPerSecond, "startup_cpu_ms")
	// The warm-up includes the first reports, which read the symbol
	// tables of every binary sampled: the start-up cost as users see it.
	b.ReportMetric(float64(startTicks)*1000/clockTicksPerSecond, "warmup_cpu_ms")
	b.ReportMetric(float64(firstSample.Milliseconds()), "first_sample_ms")
	b.ReportMetric(float64(exported), "samples_exported")
	b.ReportMetric(load, "loadavg")
	b.Logf("over %s after %s of warm-up: RSS mean %.1f MB, end %.1f MB, high-water %.1f MB; %.3f%% of a core; %d ms CPU to the first sample (%s after exec), %d ms over the warm-up; %d samples exported; load average %.2f",
		window, warm, mb(mean), mb(rss[len(rss)-1]), mb(hwm), pct, startupTicks*1000/clockTicksPerSecond, firstSample, startTicks*1000/clockTicksPerSecond, exported, load)
}

func fetchProfile(b *testing.B, url, path string) {
	b.Helper()
	resp, err := http.Get(url)
	if err != nil {
		b.Fatalf("fetching the profile: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("fetching the profile: status %s, %v", resp.Status, err)
	}
	writeFile(b, path, string(body))
}

// logLargestMappings logs the mappings of pid holding the most RSS: the
// heap, or which files' pages.
func logLargestMappings(b *testing.B, pid int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		b.Logf("reading smaps: %v", err)
		return
	}
	type mapping struct {
		name string
		kb   int64
	}
	byName := map[string]int64{}
	name := ""
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			name = "[anon]"
			if len(f) >= 6 {
				name = f[5]
			}
		case len(f) == 3 && f[0] == "Rss:":
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			byName[name] += kb
		}
	}
	var ms []mapping
	for n, kb := range byName {
		ms = append(ms, mapping{n, kb})
	}
	slices.SortFunc(ms, func(a, b mapping) int { return int(b.kb - a.kb) })
	var sb strings.Builder
	for _, m := range ms[:min(len(ms), 8)] {
		fmt.Fprintf(&sb, " %s %.1f MB;", m.name, float64(m.kb)/1024)
	}
	b.Logf("largest RSS by mapping:%s", sb.String())
}
