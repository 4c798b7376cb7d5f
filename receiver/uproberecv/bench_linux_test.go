package uproberecv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/probesite"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

// countingLogs counts consumed log records.
type countingLogs struct{ records atomic.Int64 }

func (c *countingLogs) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (c *countingLogs) ConsumeLogs(_ context.Context, l plog.Logs) error {
	c.records.Add(int64(l.LogRecordCount()))
	return nil
}

// BenchmarkRingbufToPlog measures records/s from the ringbuf to consumed
// plog: a BPF program (BPF_PROG_TEST_RUN) writes synthetic records as fast
// as the receiver reads them, never more than half the ringbuf ahead, so
// none is lost.
func BenchmarkRingbufToPlog(b *testing.B) {
	testenv.RequireBPF(b)
	cfg := &Config{Probes: []ProbeConfig{{ID: "bench", Binary: "/nonexistent/bench", Entry: "f", Exit: "return"}}}
	next := &countingLogs{}
	r, err := newLogsReceiver(receivertest.NewNopSettings(metadata.Type), cfg, next)
	if err != nil {
		b.Fatal(err)
	}
	r.opts = options{loadFiller: true}
	if err := r.Start(context.Background(), componentHost{}); err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown(context.Background())

	const batch = 1024
	ahead := int64(ringBufferBytes / 2 / 64) // records of ~64 bytes with header
	// A receiver that stops reading fails the benchmark instead of hanging
	// it: at the slowest rate ever seen (~100k records/s) a batch takes
	// ~10 ms.
	const stall = 30 * time.Second
	c0, err := r.probes.Counters()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	var produced int64
	for produced < int64(b.N) {
		if !waitUntil(stall, func() bool { return produced-next.records.Load() <= ahead }) {
			b.Fatalf("the receiver consumed %d of %d records and stopped", next.records.Load(), produced)
		}
		n := min(int64(batch), int64(b.N)-produced)
		if err := r.probes.Fill(uint32(n), 0); err != nil {
			b.Fatal(err)
		}
		produced += n
	}
	if !waitUntil(stall, func() bool { return next.records.Load() >= produced }) {
		b.Fatalf("the receiver consumed %d of %d records and stopped", next.records.Load(), produced)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	c, err := r.probes.Counters()
	if err != nil {
		b.Fatal(err)
	}
	if c.LostRingbuf != c0.LostRingbuf {
		b.Fatalf("%d records lost", c.LostRingbuf-c0.LostRingbuf)
	}
	// Every record the BPF side wrote became exactly one log record.
	if written := int64(c.Records - c0.Records); written != produced {
		b.Fatalf("BPF wrote %d records, %d asked for", written, produced)
	}
	if got := next.records.Load(); got != produced {
		b.Fatalf("%d log records consumed for %d ringbuf records", got, produced)
	}
	b.ReportMetric(float64(produced)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(c.LostRingbuf-c0.LostRingbuf), "lost")
}

// waitUntil polls cond every 50 µs until it holds or timeout passes, and
// reports whether it held.
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

// BenchmarkExecStormCPU measures this process's CPU time per spawn of a
// stripped Go binary without the symbol, with and without the negative
// cache. Static is how Go tools (kubectl, helm) usually ship; a dynamic one
// (cgo's resolver) is scanned again after ld.so maps its libraries.
//
// Every spawn must have looked at the binary once (the probe names only
// that binary, so once it is found wanting no rescan can find more) (parsed it, or asked the cache) before the clock
// stops, so a receiver falling behind cannot look cheap by missing processes
// that exited first: each lives stormLifeMs, longer than the uncached
// receiver needs for a batch.
func BenchmarkExecStormCPU(b *testing.B) {
	for _, link := range []struct {
		name          string
		cgo           string
		scansPerSpawn int64
	}{
		{"static", "0", 1},
		{"dynamic", "1", 1},
	} {
		for _, bc := range []struct {
			name string
			opts options
		}{
			{"negative_cache", options{}},
			{"no_negative_cache", options{noNegativeCache: true}},
		} {
			b.Run(link.name+"/"+bc.name, func(b *testing.B) {
				// A Go binary: parsing its .gopclntab is the cost the cache saves.
				b.Setenv("CGO_ENABLED", link.cgo)
				bin := goStormBinary(b)
				cfg := &Config{Probes: []ProbeConfig{{ID: "storm", Binary: bin, Entry: "main.absent", Exit: "return"}}}
				r, _ := startReceiver(b, cfg, bc.opts)
				st := &r.tracker.stats
				const spawns, stormLifeMs = 200, 3000
				want := spawns * link.scansPerSpawn
				looked := func() int64 { return st.evaluations.Load() + st.negativeHits.Load() }
				scans0, parses0, quiet0 := st.scans.Load(), st.evaluations.Load(), st.quietExecs.Load()
				b.ResetTimer()
				var cpu time.Duration
				for range b.N {
					before := looked()
					t0 := cpuTime(b)
					runStorm(b, bin, spawns, stormLifeMs)
					if !waitFor(30*time.Second, func() bool { return looked()-before >= want }) {
						b.Fatalf("%d spawns: the binary was looked at %d times, want %d", spawns, looked()-before, want)
					}
					cpu += cpuTime(b) - t0
					if got := looked() - before; got != want {
						b.Fatalf("%d spawns: the binary was looked at %d times, want %d", spawns, got, want)
					}
				}
				n := float64(b.N * spawns)
				b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/spawn")
				b.ReportMetric(float64(st.evaluations.Load()-parses0)/n, "parses/spawn")
				b.ReportMetric(float64(st.scans.Load()-scans0)/n, "maps-reads/spawn")
				b.ReportMetric(float64(st.quietExecs.Load()-quiet0)/n, "answered-from-event/spawn")
			})
		}
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func goStormBinary(b *testing.B) string {
	return testworkload.BuildGo(b, "gostorm", "-ldflags=-s -w")
}

// BenchmarkAttachLatency measures the time from a process exec'ing a
// binary never seen before (exec) or mapping a library never seen before
// with dlopen (dlopen) to its uprobes being attached: each iteration runs
// a fresh copy (a new inode) of the binary or library. It reports the p50
// and p99 of the receiver's own latency samples (the uprobe_attach_latency
// metric); the goal is a p99 of 5 ms.
//
// Each iteration starts after a quiet spell longer than the kernel's RCU
// grace periods, as the first exec of a new binary usually does: an attach
// right after another one is fast in the kernel anyway, and would hide what
// the warmer (see scopeprobe.Warmer, config warm_attach) saves: exec and
// dlopen run with the default config (no warmer), warm_attach with it, and
// expedite_attach with rcu_expedited set around each attach instead. Their
// file_match is not anchored, so no directory is watched and each attach
// starts at the exec or mapping.
//
// The watched_dir cases anchor file_match on the directory the copies are
// written into, which the receiver then watches: a copy is attached when
// written, and the exec (at once, or 20 ms after the write) or the dlopen
// (20 ms after its process started) may come after that. They report the
// share of iterations attached before the exec or mapping (no latency
// sample taken, and every call of the process recorded, or the run
// fails), and the p50 and p99 of the others. Every case reports the
// iterations whose file was never attached (unattached): without a
// mapping path from BPF (sys_exit), a process starved of bpfcol's
// attention for its 50 ms leaves its library unnamed, which the receiver
// counts; a file never attached and not counted fails the run. Each
// attach is shown to work: a binary, retained, is run again and its call
// recorded; a library's later calls are.
//
// The latency is split in two: call-p50/p99 is the attach call alone (the
// kernel's registration: on this kernel one RCU grace period's wait on the
// first link of an attach, nothing on the others, and the wait for a CPU
// after it), before-call-p50/p99 is ours (the event's notice, the lookup,
// waiting behind other events).
func BenchmarkAttachLatency(b *testing.B) {
	testenv.RequireBPF(b)
	short := testworkload.BuildC(b, "shortcalls.c", "-O2", "-g")
	lib := testworkload.BuildC(b, "dlib.c", "-O2", "-g", "-shared", "-fPIC")
	opener := testworkload.BuildC(b, "dlopener.c", "-O2", "-g")
	for _, mode := range []struct {
		name, trigger, entry string
		opts                 options
		expedite             bool
		// watched anchors file_match on the directory, execGap is the
		// wait between writing the copy and running it.
		watched bool
		execGap time.Duration
	}{
		{name: "exec", trigger: triggerExec, entry: "short_call"},
		{name: "dlopen", trigger: triggerMapping, entry: "lib_call"},
		{name: "exec/warm_attach", trigger: triggerExec, entry: "short_call", opts: options{warmAttach: true}},
		{name: "dlopen/warm_attach", trigger: triggerMapping, entry: "lib_call", opts: options{warmAttach: true}},
		{name: "exec/expedite_attach", trigger: triggerExec, entry: "short_call", expedite: true},
		{name: "dlopen/expedite_attach", trigger: triggerMapping, entry: "lib_call", expedite: true},
		{name: "exec/watched_dir", trigger: triggerExec, entry: "short_call", watched: true},
		{name: "exec/watched_dir/run_20ms_later", trigger: triggerExec, entry: "short_call", watched: true, execGap: 20 * time.Millisecond},
		{name: "dlopen/watched_dir", trigger: triggerMapping, entry: "lib_call", watched: true},
	} {
		b.Run(mode.name, func(b *testing.B) {
			dir := b.TempDir()
			match := regexp.QuoteMeta(dir) + "/"
			if mode.watched {
				match = "^" + match
			}
			cfg := &Config{
				Probes:         []ProbeConfig{{ID: "lat", FileMatch: match, Entry: mode.entry, Exit: "return"}},
				Retain:         RetainConfig{MaxBinaries: maxBinaries, MaxAge: time.Hour},
				ExpediteAttach: mode.expedite,
			}
			r, sink := startReceiver(b, cfg, mode.opts)
			st := &r.tracker.stats
			samples := func() int64 { n, _, _ := r.tracker.latency.percentiles(mode.trigger); return n }
			records := func(pid int) int { return len(recordsByPID(flatten(sink), "lat")[int64(pid)]) }
			// Each iteration is judged after the next quiet spell, when its
			// latency sample, if any, has been taken. A sample says the
			// attach came after the exec or mapping; none says it came
			// before, which the workload's calls must then show: every one
			// recorded. A file never attached fails the run unless the
			// receiver counted why (a mapping left unnamed: README's
			// "Attach latency").
			type iteration struct {
				i, pid, calls int
				samples       int64 // before it ran
				unnamed       int64 // mappings_unnamed before it ran
				attached      bool
				copy          string
			}
			var pending *iteration
			before, unattached, recorded := 0, 0, 0
			judge := func() {
				it := pending
				if it == nil {
					return
				}
				pending = nil
				n := samples() - it.samples
				got := records(it.pid)
				if n == 0 && it.attached {
					// Records come in batches (batch.timeout, 200 ms).
					waitFor(5*time.Second, func() bool { got = records(it.pid); return got == it.calls })
				}
				recorded += got
				if !it.attached {
					if st.mappingsUnnamed.Load() == it.unnamed {
						b.Fatalf("iteration %d: %s never attached, and no mapping was counted unnamed; %d known failures skipped, %d evaluations, %d processes exited before attach",
							it.i, it.copy, st.knownFailures.Load(), st.evaluations.Load(), st.exitedBeforeAttach.Load())
					}
					b.Logf("iteration %d: %s not attached: its mapping was left unnamed (counted)", it.i, it.copy)
					unattached++
					return
				}
				switch {
				case n > 1:
					b.Fatalf("iteration %d: %d latency samples for one %s", it.i, n, mode.trigger)
				case n == 0 && got != it.calls:
					b.Fatalf("iteration %d: no latency sample, so attached before the %s, yet %d of its %d calls recorded", it.i, mode.trigger, got, it.calls)
				case n == 0:
					before++
				}
			}
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				time.Sleep(quietSpell)
				judge()
				b.StartTimer()
				copyTo := filepath.Join(dir, "f"+strconv.Itoa(i))
				it := &iteration{i: i, samples: samples(), unnamed: st.mappingsUnnamed.Load(), copy: copyTo}
				var cmd *exec.Cmd
				if mode.trigger == triggerExec {
					copyFileTB(b, short, copyTo)
					cmd, it.calls = exec.Command(copyTo, "1"), 1
				} else {
					copyFileTB(b, lib, copyTo)
					// The dlopen comes after the exec's own scan, which would
					// otherwise find the library mapped already and count
					// its attach as the exec's. The process then lives 50 ms
					// (a call a millisecond): without BPF LSM or fentry the
					// mapping event carries no path, and a process gone
					// before its maps are read leaves its library unnamed.
					cmd, it.calls = exec.Command(opener, copyTo, "20", "50", os.DevNull), 50
				}
				time.Sleep(mode.execGap)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
				it.pid = cmd.Process.Pid
				key := keyOf(b, copyTo)
				it.attached = waitFor(5*time.Second, func() bool { return r.tracker.isAttached(key) })
				if it.attached {
					// The uprobes the latency was measured to work: the
					// copy, retained, is run (or loaded) again and every
					// call recorded.
					b.StopTimer()
					again := exec.Command(copyTo, "1")
					if mode.trigger != triggerExec {
						again = exec.Command(opener, copyTo, "20", "50", os.DevNull)
					}
					if out, err := again.CombinedOutput(); err != nil {
						b.Fatalf("%v: %s", err, out)
					}
					if !waitFor(5*time.Second, func() bool { return records(again.Process.Pid) == it.calls }) {
						b.Fatalf("iteration %d: a run of %s after its attach: %d records, want its %d calls", i, copyTo, records(again.Process.Pid), it.calls)
					}
					recorded++
					b.StartTimer()
				}
				pending = it
			}
			time.Sleep(quietSpell)
			judge()
			if !mode.watched {
				// The sample is taken just after the attach the loop waited for.
				if want := int64(b.N - unattached - before); !waitFor(time.Second, func() bool { return samples() >= want }) {
					b.Fatalf("%d latency samples, want %d: one per iteration attached after its %s", samples(), want, mode.trigger)
				}
			}
			if recorded == 0 {
				b.Fatalf("%d iterations recorded no call: the uprobes attached never fired", b.N)
			}
			n, p50, p99 := r.tracker.latency.percentiles(mode.trigger)
			b.ReportMetric(float64(p50)/float64(time.Millisecond), "p50-ms")
			b.ReportMetric(float64(p99)/float64(time.Millisecond), "p99-ms")
			b.ReportMetric(float64(n), "samples")
			b.ReportMetric(float64(unattached), "unattached")
			if mode.watched {
				b.ReportMetric(100*float64(before)/float64(b.N), "%attached-before")
			}
			// The attach calls alone: the kernel's part, without the wait
			// for the event and for a CPU, nor the evaluation.
			_, c50, c99 := r.tracker.attachCalls.percentiles(attachCallKey)
			b.ReportMetric(float64(c50)/float64(time.Millisecond), "call-p50-ms")
			b.ReportMetric(float64(c99)/float64(time.Millisecond), "call-p99-ms")
			// Ours before the kernel: the event's notice and the lookup.
			_, e50, e99 := r.tracker.attachCalls.percentiles(beforeCallKey)
			b.ReportMetric(float64(e50)/float64(time.Millisecond), "before-call-p50-ms")
			b.ReportMetric(float64(e99)/float64(time.Millisecond), "before-call-p99-ms")
			if st := r.probes.ExpediteStats(); st.Raised > 0 {
				// How long the whole host's grace periods were expedited
				// on each attach's account.
				b.ReportMetric(float64(st.SetFor)/float64(st.Raised)/float64(time.Millisecond), "expedited-ms/attach")
			}
		})
	}
}

// quietSpell is longer than the kernel's RCU grace periods here (4-25 ms
// measured, more under load).
const quietSpell = 100 * time.Millisecond

// BenchmarkNodeLookupCPU measures the CPU time of finding node's callback
// scope constructor by its demangled full signature and by its mangled
// name: cold (the binary opened afresh, its symbol table read) and warm
// (the same opened binary asked again). The goal is 200 ms cold for
// the demangled name; the receiver caches results by file identity, so a
// later node process costs nothing at all.
func BenchmarkNodeLookupCPU(b *testing.B) {
	const node = "/usr/bin/node"
	names := map[string]string{
		"demangled": "node::InternalCallbackScope::InternalCallbackScope(node::Environment*, v8::Local<v8::Object>, node::async_context const&, int)",
		"mangled":   "_ZN4node21InternalCallbackScopeC2EPNS_11EnvironmentEN2v85LocalINS3_6ObjectEEERKNS_13async_contextEi",
	}
	for _, kind := range []string{"demangled", "mangled"} {
		for _, warm := range []bool{false, true} {
			name := kind + "/cold"
			if warm {
				name = kind + "/warm"
			}
			b.Run(name, func(b *testing.B) {
				var bin *probesite.Binary
				open := func() {
					f, err := os.Open(node)
					if err != nil {
						b.Fatal(err)
					}
					if bin, err = probesite.Open(f, symbolize.NewTables(0)); err != nil {
						b.Fatal(err)
					}
				}
				spec, err := probesite.ParseSpec(names[kind])
				if err != nil {
					b.Fatal(err)
				}
				if warm {
					open()
					defer bin.Close()
					if _, err := bin.Lookup(spec); err != nil {
						b.Fatal(err)
					}
				}
				var cpu time.Duration
				for b.Loop() {
					cpu += threadCPU(func() {
						if !warm {
							open()
						}
						if _, err := bin.Lookup(spec); err != nil {
							b.Fatal(err)
						}
						if !warm {
							bin.Close()
						}
					})
				}
				b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

func copyFileTB(tb testing.TB, from, to string) {
	tb.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		tb.Fatal(err)
	}
}
