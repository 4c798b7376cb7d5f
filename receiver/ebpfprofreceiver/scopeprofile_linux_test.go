package ebpfprofreceiver

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
	"github.com/bpfcol/bpfcol/receiver/uproberecv"
)

// scopeRecord is one log record of the uprobe receiver.
type scopeRecord struct {
	probe, traceID, spanID string
	start, end             int64 // unix nanos
}

// bothReceivers are an ebpfprof and a uprobe receiver of one collector.
type bothReceivers struct {
	prof     *profilesReceiver
	profSink *gatedSink
	logs     receiver.Logs
	logSink  *consumertest.LogsSink
}

// startBoth creates both receivers, as the collector creates every
// component before it starts any, then starts them in the order given.
func startBoth(t *testing.T, cfg *Config, probes []uproberecv.ProbeConfig, profilerFirst bool) *bothReceivers {
	t.Helper()
	testenv.RequireBPF(t)
	b := &bothReceivers{profSink: new(gatedSink), logSink: new(consumertest.LogsSink)}
	var err error
	if b.prof, err = newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, b.profSink); err != nil {
		t.Fatal(err)
	}
	f := uproberecv.NewFactory()
	ucfg := f.CreateDefaultConfig().(*uproberecv.Config)
	ucfg.Probes = probes
	if b.logs, err = f.CreateLogs(context.Background(), receivertest.NewNopSettings(f.Type()), ucfg, b.logSink); err != nil {
		t.Fatal(err)
	}
	order := []component.Component{b.logs, b.prof}
	if profilerFirst {
		order = []component.Component{b.prof, b.logs}
	}
	for _, c := range order {
		if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
	}
	if !scopes.Open() {
		t.Fatal("the shared map of open scopes was not created")
	}
	return b
}

// stop shuts both down, the uprobe receiver first, and checks that the
// shared map was dropped after the last.
func (b *bothReceivers) stop(t *testing.T) {
	t.Helper()
	if err := b.logs.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if !scopes.Open() {
		t.Error("shared map dropped while the ebpfprof receiver still runs")
	}
	if err := b.prof.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if scopes.Open() {
		t.Error("shared map still open after both receivers stopped")
	}
}

// records returns the uprobe receiver's records of probe.
func (b *bothReceivers) records(probe string) []scopeRecord {
	var out []scopeRecord
	for _, l := range b.logSink.AllLogs() {
		for i := 0; i < l.ResourceLogs().Len(); i++ {
			sls := l.ResourceLogs().At(i).ScopeLogs()
			for j := 0; j < sls.Len(); j++ {
				lrs := sls.At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					lr := lrs.At(k)
					if lr.Body().Str() != probe {
						continue
					}
					start, _ := lr.Attributes().Get(conventions.StartTimeUnixNano)
					end, _ := lr.Attributes().Get(conventions.EndTimeUnixNano)
					out = append(out, scopeRecord{probe: probe, traceID: lr.TraceID().String(), spanID: lr.SpanID().String(),
						start: start.Int(), end: end.Int()})
				}
			}
		}
	}
	return out
}

// waitReportedPast waits until the uprobe receiver has n records of probe
// and the profiles of a report interval that began after the last record
// ended came (intervals are reported in order), so every call's samples
// were reported, however late a loaded host's report comes. The uprobe
// receiver stops first, and a probe is named only while its receiver
// runs.
func (b *bothReceivers) waitReportedPast(t *testing.T, probe string, n int, timeout time.Duration) {
	t.Helper()
	reportedPast := func() bool {
		recs := b.records(probe)
		if len(recs) < n {
			return false
		}
		var last int64
		for _, r := range recs {
			last = max(last, r.end)
		}
		b.profSink.mu.Lock()
		defer b.profSink.mu.Unlock()
		for _, p := range b.profSink.all {
			if intervalStart(p) > last+clockSlack {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(timeout); !reportedPast(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no report interval began after the last of %d %s records within %s", n, probe, timeout)
		}
	}
}

// samples returns the profile samples of pid.
func (b *bothReceivers) samples(pid int) []pprofiletest.Sample {
	b.profSink.mu.Lock()
	defer b.profSink.mu.Unlock()
	var out []pprofiletest.Sample
	for _, p := range b.profSink.all {
		for _, s := range pprofiletest.Samples(p) {
			if s.PID == int64(pid) {
				out = append(out, s)
			}
		}
	}
	return out
}

func hasFrame(s pprofiletest.Sample, name string) bool { return slices.Contains(s.Names, name) }

// within reports whether every timestamp of s lies in r, give or take the
// clock conversions (clockSlack).
func within(s pprofiletest.Sample, r scopeRecord) bool {
	for _, ts := range s.Timestamps {
		if int64(ts) < r.start-clockSlack || int64(ts) > r.end+clockSlack {
			return false
		}
	}
	return true
}

const (
	// clockSlack is how far apart two conversions of CLOCK_MONOTONIC to
	// Unix time (the receivers' and the test's) may place one instant.
	clockSlack = int64(time.Millisecond)
	// scopeTrapSlack bounds how much shorter a scope is than the
	// workload's measure of its call: the entry and exit traps, and a
	// record's ringbuf wakeup, on a SCHED_FIFO thread.
	scopeTrapSlack = 500 * time.Microsecond
)

const (
	onCPUType  = conventions.SampleTypeSamples + "/" + conventions.UnitCount
	offCPUType = conventions.SampleTypeOffCPU + "/" + conventions.UnitNanoseconds
)

// TestScopeProfilesC probes a C function that burns 50 ms of CPU then
// sleeps 50 ms, called 20 times, under both receivers (sampling at 200 Hz,
// off-CPU at probability 1). The workload's own CLOCK_MONOTONIC times of
// each call are the truth: each log record lies inside its call and is
// shorter by at most the probes' traps, each record's span id has linked
// on-CPU samples worth 50 ms ± 30% and blocked off-CPU weight worth its
// 50 ms sleep ± 5% (as the workload timed the sleep), every linked sample
// was taken inside its call and names its probe, and no sample taken
// outside every call carries a link.
func TestScopeProfilesC(t *testing.T) {
	const calls = 20
	bin := testworkload.BuildC(t, "scopeburn.c", "-O1", "-g", "-fno-omit-frame-pointer")
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 200
	cfg.ReportInterval = time.Second
	cfg.OffCPU = OffCPUConfig{Enabled: true, MinDuration: time.Millisecond, Probability: 1}
	b := startBoth(t, cfg, []uproberecv.ProbeConfig{{ID: "scoped", Binary: bin, Entry: "scoped_call", Exit: "return"}}, false)
	stopped := false
	defer func() {
		if !stopped {
			b.stop(t)
		}
	}()

	// A 200 Hz sampler takes a sample every 5 ms of a CPU's time. The
	// burn's 50 ms of thread CPU time are worth 10 samples only if they
	// run as one stretch: time-sliced with other runnable tasks (as on a
	// busy 2-CPU host) they split into slices that a tick lands in or
	// misses, and a call's count scattered from 5 to 17. The workload runs
	// SCHED_FIFO so no other task cuts its burn.
	pid, out := runGated(t, b.prof, bin, true, fmt.Sprint(calls))
	// The workload's calls on the Unix clock, converted here, not by the
	// receivers.
	offset := testworkload.MonotonicToUnix()
	var own []scopeRecord
	var slept []int64
	for _, l := range out {
		var start, end, ns int64
		if n, _ := fmt.Sscanf(l, "call %d %d %d", &start, &end, &ns); n == 3 {
			own = append(own, scopeRecord{start: start + offset, end: end + offset})
			slept = append(slept, ns)
		}
	}
	if len(slept) != calls {
		t.Fatalf("workload reported %d calls, want %d: %q", len(slept), calls, out)
	}
	// The uprobe receiver stops first, and a probe is named only while its
	// receiver runs: wait until the profiles reported a sample taken after
	// the last call (the workload burns 10 ms after it), so every call's
	// samples were reported, however late a loaded host's report comes.
	b.waitReportedPast(t, "scoped", calls, 10*cfg.ReportInterval)
	// The host's off-CPU outcomes, for a missing wait's cause.
	counters, err := b.prof.sampler.Counters()
	if err != nil {
		t.Fatal(err)
	}
	checkNoWaitLost(t, b.prof, int64(pid))
	b.stop(t)
	stopped = true

	records := b.records("scoped")
	slices.SortFunc(records, func(x, y scopeRecord) int { return cmp.Compare(x.start, y.start) })
	if len(records) != calls {
		t.Fatalf("%d log records, want %d", len(records), calls)
	}
	bySpan := map[string]scopeRecord{}
	callOf := map[string]scopeRecord{} // span -> the workload's call
	var worstStart, worstEnd int64
	for i, r := range records {
		if r.spanID == "" || r.traceID == "" {
			t.Fatalf("log record without ids: %+v", r)
		}
		if _, dup := bySpan[r.spanID]; dup {
			t.Fatalf("span id %s on two records", r.spanID)
		}
		bySpan[r.spanID] = r
		// The scope opens after the workload read its clock and closes
		// before it read it again; the traps and the ringbuf wakeup
		// between are all that may separate them.
		c := own[i]
		if r.start < c.start-clockSlack || r.end > c.end+clockSlack {
			t.Errorf("record %d (%d..%d) lies outside the workload's call %d (%d..%d): starts %s after it, ends %s before it",
				i, r.start, r.end, i, c.start, c.end, time.Duration(r.start-c.start), time.Duration(c.end-r.end))
		}
		if d := (c.end - c.start) - (r.end - r.start); d > int64(scopeTrapSlack) {
			t.Errorf("record %d lasted %s, the workload's call %s: %s shorter, more than %s", i,
				time.Duration(r.end-r.start), time.Duration(c.end-c.start), time.Duration(d), scopeTrapSlack)
		}
		callOf[r.spanID] = c
		worstStart, worstEnd = max(worstStart, r.start-c.start), max(worstEnd, c.end-r.end)
	}
	t.Logf("records inside the workload's calls: entry at most %s after the call's start, exit at most %s before its end",
		time.Duration(worstStart), time.Duration(worstEnd))
	period := int64(time.Second) / int64(cfg.SamplingFrequency)
	onNs, blockedNs, preemptedNs := map[string]int64{}, map[string]int64{}, map[string]int64{}
	var outside, outsideLinked, linkedSamples int64
	for _, s := range b.samples(pid) {
		if s.SpanID == "" {
			continue
		}
		r, ok := bySpan[s.SpanID]
		switch {
		case !ok:
			t.Errorf("sample linked to span %s, which no log record has: %v", s.SpanID, s.Names)
			continue
		case s.TraceID != r.traceID:
			t.Errorf("sample linked to span %s with trace %s, its record has %s", s.SpanID, s.TraceID, r.traceID)
		case s.Labels[conventions.ProbeID] != "scoped":
			t.Errorf("linked sample's probe.id = %q, want scoped", s.Labels[conventions.ProbeID])
		case !within(s, callOf[s.SpanID]):
			c := callOf[s.SpanID]
			t.Errorf("sample linked to span %s taken outside its call by the workload's clock (%d..%d): %v at %v", s.SpanID, c.start, c.end, s.Names, s.Timestamps)
		}
		linkedSamples++
		switch s.SampleType {
		case onCPUType:
			onNs[s.SpanID] += s.Count * period
		case offCPUType:
			if s.Labels[conventions.OffCPUReason] == conventions.OffCPUReasonPreempted {
				preemptedNs[s.SpanID] += s.Count
			} else {
				blockedNs[s.SpanID] += s.Count
			}
		}
	}
	for _, s := range b.samples(pid) {
		if hasFrame(s, "scoped_call") {
			continue
		}
		inAny := false
		for _, c := range own {
			inAny = inAny || within(s, c)
		}
		if inAny {
			continue
		}
		outside++
		if s.SpanID != "" {
			outsideLinked++
			t.Errorf("sample outside every scope carries link %s: %s %v", s.SpanID, s.SampleType, s.Names)
		}
	}
	t.Logf("%d linked samples, %d outside every scope (%d linked)", linkedSamples, outside, outsideLinked)
	checkScopeStacksWhole(t, b.samples(pid), "scoped_call")
	if outside == 0 {
		t.Error("no sample outside the scopes: the workload's between-call work was not seen, nothing was checked")
	}
	want := 50 * time.Millisecond
	for i, r := range records {
		on, blocked := time.Duration(onNs[r.spanID]), time.Duration(blockedNs[r.spanID])
		t.Logf("call %d span %s: on-CPU %s, blocked %s (+ preempted %s), the workload slept %s",
			i, r.spanID, on, blocked, time.Duration(preemptedNs[r.spanID]), time.Duration(slept[i]))
		if on < want*70/100 || on > want*130/100 {
			t.Errorf("span %s: linked on-CPU samples worth %s, want 50ms ± 30%%", r.spanID, on)
		}
		// The 50 ms sleep is what the call spends blocked; on a loaded
		// host the sleep itself can overrun (the workload's own clock says
		// by how much), so the weight is held to what the call blocked.
		if own := time.Duration(slept[i]); blocked < own*95/100 || blocked > own*105/100 {
			t.Errorf("span %s: linked off-CPU weight %s, want the call's 50ms sleep (%s by its own clock) ± 5%% (host's off-CPU counters %+v)",
				r.spanID, blocked, own, counters)
		}
	}
}

// checkScopeStacksWhole asserts that at least 95% of the on-CPU samples,
// and of the off-CPU events, linked to a scope reach the process root
// through the probed function fn: its return address, which the scope's
// uretprobe (exit: return) replaced with the kernel's trampoline, was
// taken back.
func checkScopeStacksWhole(t *testing.T, samples []pprofiletest.Sample, fn string) {
	t.Helper()
	for _, typ := range []string{onCPUType, offCPUType} {
		var linked, whole int64
		var cut []string
		for _, s := range samples {
			if s.SpanID == "" || s.SampleType != typ {
				continue
			}
			n := int64(len(s.Timestamps)) // events, whatever their weight
			linked += n
			if names := s.UserNames(); completeStack(names) && slices.Contains(names, fn) {
				whole += n
			} else if len(cut) < 5 {
				cut = append(cut, "["+joinNames(names)+"]")
			}
		}
		t.Logf("%s: %d of %d linked samples reach the root through %s (%.1f%%)", typ, whole, linked, fn, pct(whole, linked))
		if linked == 0 {
			t.Errorf("%s: no sample linked to a scope", typ)
		} else if pct(whole, linked) < 95 {
			t.Errorf("%s: %.1f%% of the linked samples reach the root through %s, want >= 95%%; some that do not: %v", typ, pct(whole, linked), fn, cut)
		}
	}
}

// runGated starts bin with a start file and calls, creates the file once
// the ebpfprof receiver has loaded the process's unwind tables, and
// returns its output lines once it exited. With fifo, its main thread runs
// SCHED_FIFO: nothing but interrupts and real-time tasks preempts it.
func runGated(t *testing.T, prof *profilesReceiver, bin string, fifo bool, args ...string) (pid int, lines []string) {
	t.Helper()
	startFile := filepath.Join(t.TempDir(), "start")
	cmd := exec.Command(bin, append([]string{startFile}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if fifo {
		// It waits for the start file, so it runs nothing yet.
		if err := unix.SchedSetAttr(cmd.Process.Pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}, 0); err != nil {
			t.Fatalf("making pid %d SCHED_FIFO: %v", cmd.Process.Pid, err)
		}
	}
	// The process is sampled while it waits (its polls of the start
	// file), which has its tables loaded.
	for deadline := time.Now().Add(30 * time.Second); !prof.unwind.Ready(uint32(cmd.Process.Pid)); {
		if time.Now().After(deadline) {
			t.Fatalf("unwind tables of pid %d not loaded after 30s: %+v", cmd.Process.Pid, prof.unwind.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.WriteFile(startFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return cmd.Process.Pid, lines
}

// TestScopeProfilesGo probes a Go function in which goroutines burn CPU,
// yield and park, migrating between threads while the scope is open
// (scopes keyed by goroutine, the sampler reading R14). Links follow the
// goroutine: at least 95% of the samples taken inside the function carry
// the link of a scope of the probe, each scope's samples all come from the
// one goroutine whose call it was (its own worker function is in every
// stack), and lie within its time.
func TestScopeProfilesGo(t *testing.T) {
	const calls = 10
	bin := testworkload.BuildGo(t, "goscopeburn")
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 200
	cfg.ReportInterval = time.Second
	b := startBoth(t, cfg, []uproberecv.ProbeConfig{{ID: "burn", Binary: bin, Entry: "main.burnScope", Exit: "return"}}, true)
	stopped := false
	defer func() {
		if !stopped {
			b.stop(t)
		}
	}()
	pid, out := runGated(t, b.prof, bin, false, fmt.Sprint(calls))
	t.Logf("workload: %q", out)
	var migrations int
	for _, l := range out {
		fmt.Sscanf(l, "migrations %d", &migrations)
	}
	b.waitReportedPast(t, "burn", 4*calls, 10*cfg.ReportInterval)
	b.stop(t)
	stopped = true

	records := b.records("burn")
	if len(records) != 4*calls {
		t.Fatalf("%d log records, want %d", len(records), 4*calls)
	}
	if migrations == 0 {
		t.Error("no call changed threads: nothing shows that links follow the goroutine")
	}
	bySpan := map[string]scopeRecord{}
	for _, r := range records {
		bySpan[r.spanID] = r
	}
	workers := map[string]map[string]int64{} // span -> worker -> samples
	var inside, linked, linkedElsewhere int64
	for _, s := range b.samples(pid) {
		if s.SpanID != "" {
			// Every linked sample, whatever its stack: a known scope, in
			// its time, of the probe.
			r, ok := bySpan[s.SpanID]
			switch {
			case !ok:
				t.Errorf("sample linked to span %s, which no log record has: %v", s.SpanID, s.Names)
				continue
			case !within(s, r):
				t.Errorf("sample linked to span %s taken outside its scope (%d..%d) at %v: %v", s.SpanID, r.start, r.end, s.Timestamps, s.Names)
			case s.Labels[conventions.ProbeID] != "burn":
				t.Errorf("linked sample's probe.id = %q, want burn", s.Labels[conventions.ProbeID])
			}
		}
		if s.SampleType != onCPUType || !hasFrame(s, "main.burnScope") {
			// Linked samples whose stack stops short of the function
			// (in the vDSO clock, which has no frame to walk by).
			if s.SpanID != "" {
				linkedElsewhere += s.Count
			}
			continue
		}
		inside += s.Count
		if s.SpanID == "" {
			continue
		}
		linked += s.Count
		for _, w := range []string{"main.worker0", "main.worker1", "main.worker2", "main.worker3"} {
			if hasFrame(s, w) {
				if workers[s.SpanID] == nil {
					workers[s.SpanID] = map[string]int64{}
				}
				workers[s.SpanID][w] += s.Count
			}
		}
	}
	t.Logf("%d calls changed threads; %d samples inside main.burnScope, %d linked (%.1f%%), %d scopes with samples; %d linked samples with shorter stacks",
		migrations, inside, linked, 100*float64(linked)/float64(max(inside, 1)), len(workers), linkedElsewhere)
	if inside < 100 {
		t.Fatalf("only %d samples inside main.burnScope", inside)
	}
	if linked*100 < inside*95 {
		t.Errorf("%d of %d samples inside the scope carry its link, want at least 95%%", linked, inside)
	}
	// A linked sample is taken inside the function: its stack must show
	// it, but for the few cut short (none in 4 runs here).
	if linkedElsewhere*100 > (linked+linkedElsewhere)*5 {
		t.Errorf("%d of %d linked samples have stacks without main.burnScope, want at most 5%%", linkedElsewhere, linked+linkedElsewhere)
	}
	for span, ws := range workers {
		if len(ws) != 1 {
			t.Errorf("scope %s has samples of several goroutines: %v", span, ws)
		}
	}
}

// TestScopeMapOnlyWithBoth checks that either receiver alone starts without
// the shared map of open scopes: the sampler then loads no scope lookup and
// the probes write no scope.
func TestScopeMapOnlyWithBoth(t *testing.T) {
	testenv.RequireBPF(t)
	if scopes.Declared(scopes.Writer) || scopes.Declared(scopes.Reader) {
		t.Fatal("a receiver of an earlier test was never shut down: its role is still declared")
	}
	cfg := createDefaultConfig().(*Config)
	prof, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, new(gatedSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if scopes.Open() {
		t.Error("ebpfprof receiver alone created the shared map")
	}
	if err := prof.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	bin := testworkload.BuildC(t, "scopeburn.c", "-O1", "-g")
	f := uproberecv.NewFactory()
	ucfg := f.CreateDefaultConfig().(*uproberecv.Config)
	ucfg.Probes = []uproberecv.ProbeConfig{{ID: "scoped", Binary: bin, Entry: "scoped_call", Exit: "return"}}
	logs, err := f.CreateLogs(context.Background(), receivertest.NewNopSettings(f.Type()), ucfg, new(consumertest.LogsSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := logs.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if scopes.Open() {
		t.Error("uprobe receiver alone created the shared map")
	}
	if err := logs.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if scopes.Declared(scopes.Writer) || scopes.Declared(scopes.Reader) {
		t.Error("a role is still declared after both receivers shut down")
	}
}
