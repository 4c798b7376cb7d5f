package ebpfprofreceiver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// blockedThread is one thread of the off-CPU workload: the time it spent
// blocked, by its own clock_gettime, and the stack it blocks in.
type blockedThread struct {
	role       string
	tid        int64
	blockedNs  int64
	userChain  []string // leaf first, in order, libc frames may sit between
	kernelFunc func(string) bool
}

// TestOffCPUBlockingStacks runs the C off-CPU workload (a thread sleeping
// 20 ms in nanosleep 100 times, one blocking on a pipe read) under the
// receiver with off_cpu enabled at probability 1. For each thread, the
// off-CPU profile names the blocking stack, kernel and user, down to the
// process root, and its total weight is within 5% of the time the
// workload measured itself blocked.
func TestOffCPUBlockingStacks(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "offcpu.c", append(noFramePointers, "-pthread")...)
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var sink gatedSink
	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = time.Second
	cfg.OffCPU = OffCPUConfig{Enabled: true, MinDuration: time.Millisecond, Probability: 1}
	r, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, &sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	shutdown := func() {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
	// The stacks are walked by CFI (the workload has no frame pointers):
	// start once the process's tables are in BPF.
	start := time.Now()
	for !r.unwind.Ready(uint32(cmd.Process.Pid)) {
		if time.Since(start) > 30*time.Second {
			shutdown()
			t.Fatalf("unwind tables not loaded after 30s: %+v", r.unwind.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	threads := []*blockedThread{
		{role: "sleeper", userChain: []string{"do_sleep", "sleeper"},
			kernelFunc: func(n string) bool { return strings.Contains(n, "nanosleep") }},
		{role: "reader", userChain: []string{"wait_pipe", "reader"},
			kernelFunc: func(n string) bool { return strings.HasSuffix(n, "pipe_read") }}, // anon_pipe_read since 6.16
	}
	out := bufio.NewScanner(stdout)
	for _, th := range threads {
		if !out.Scan() {
			t.Fatalf("workload output ended: %v", out.Err())
		}
		var role string
		if _, err := fmt.Sscan(out.Text(), &role, &th.tid, &th.blockedNs); err != nil || role != th.role {
			t.Fatalf("workload line %q: want %q, tid and ns (%v)", out.Text(), th.role, err)
		}
	}
	// Every switch-in of the workload's threads has happened: the report
	// after the one under way holds their last events (drained before it).
	reports := func() int { sink.mu.Lock(); defer sink.mu.Unlock(); return len(sink.all) }
	for n0, deadline := reports(), time.Now().Add(30*time.Second); reports() < n0+2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no report within 30 s after the workload's waits ended")
		}
	}
	counters, _ := r.sampler.Counters()
	checkNoWaitLost(t, r, threads[0].tid, threads[1].tid)
	shutdown()
	t.Logf("off-CPU counters: events %d, shorter than min %d, threads full %d, ringbuf drops %d",
		counters.OffCPUEvents, counters.OffCPUShort, counters.OffCPUFull, counters.DroppedRingbuf)
	if counters.DroppedRingbuf != 0 {
		t.Errorf("%d records dropped at the ringbuf: the totals below may fall short", counters.DroppedRingbuf)
	}

	sink.mu.Lock()
	defer sink.mu.Unlock()
	var samples []pprofiletest.Sample
	for _, p := range sink.all {
		for _, s := range pprofiletest.Samples(p) {
			if s.PID == int64(cmd.Process.Pid) && s.SampleType == conventions.SampleTypeOffCPU+"/"+conventions.UnitNanoseconds {
				samples = append(samples, s)
			}
		}
	}
	for _, th := range threads {
		var total, inChain int64
		var other []string
		for _, s := range samples {
			if !slices.Contains(s.ThreadIDs, th.tid) {
				continue
			}
			total += s.Count
			user, kernel := s.UserNames(), s.KernelNames()
			// The stack the thread waits in, not the profiler's own frames
			// (the BPF program, the tracepoint) nor the scheduler's.
			if slices.ContainsFunc(kernel, func(n string) bool {
				return strings.HasPrefix(n, "bpf_") || n == "__schedule" || n == "schedule"
			}) {
				t.Errorf("%s: kernel stack [%s] holds the profiler's or the scheduler's frames", th.role, joinNames(kernel))
			}
			if holdsInOrderAnywhere(user, th.userChain) && len(user) > 0 && isRoot(user[len(user)-1]) &&
				slices.ContainsFunc(kernel, th.kernelFunc) {
				inChain += s.Count
				if s.Labels[conventions.OffCPUReason] != conventions.OffCPUReasonBlocked {
					t.Errorf("%s: blocking stack reported %q", th.role, s.Labels[conventions.OffCPUReason])
				}
			} else if len(other) < 3 {
				other = append(other, fmt.Sprintf("%dns user [%s] kernel [%s]", s.Count, joinNames(user), joinNames(kernel)))
			}
		}
		ratio := float64(total) / float64(th.blockedNs)
		t.Logf("%s (tid %d): blocked %v by its clock, off-CPU weight %v (%.2f%%), %v of it in the blocking stack; other stacks: %v",
			th.role, th.tid, time.Duration(th.blockedNs), time.Duration(total), 100*ratio, time.Duration(inChain), other)
		if math.Abs(ratio-1) > 0.05 {
			t.Errorf("%s: off-CPU weight %v is not within 5%% of the %v blocked", th.role, time.Duration(total), time.Duration(th.blockedNs))
		}
		// The blocking call is where the thread waits, kernel and user
		// side, to the process root.
		if float64(inChain) < 0.95*float64(th.blockedNs) {
			t.Errorf("%s: only %v of the off-CPU weight names the blocking stack %v down to the root with its kernel side; others: %v",
				th.role, time.Duration(inChain), th.userChain, other)
		}
	}
}

// checkNoWaitLost fails the test, apart from its weight checks, if one of
// tids lost a kept off-CPU wait other than at a switch-in the kernel did
// not report to sched_switch (which no program sees): each loss of a
// thread needs an unreported switch-in of its own.
func checkNoWaitLost(t *testing.T, r *profilesReceiver, tids ...int64) {
	t.Helper()
	lost, err := r.sampler.UnendedThreads()
	if err != nil {
		t.Fatal(err)
	}
	hidden, err := r.sampler.UnreportedThreads()
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.sampler.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		n, h := lost[uint32(tid)], hidden[uint32(tid)]
		switch {
		case n > h:
			t.Errorf("thread %d lost %d kept waits, with %d of its switch-ins unreported (%d switches unreported on the host, %d waits lost on it)",
				tid, n, h, c.OffCPUUnreported, c.OffCPUUnended)
		case n > 0:
			t.Logf("thread %d lost %d kept waits, each at a switch-in the kernel did not report (%d of them)", tid, n, h)
		}
	}
}

// isRoot reports whether name is a process root function, under glibc's
// internal alias too (__GI___clone3).
func isRoot(name string) bool {
	return rootFunctions[name] || rootFunctions[strings.TrimPrefix(name, "__GI_")]
}

// holdsInOrderAnywhere reports whether names holds chain in order, the
// first element anywhere (libc's wrappers sit below the workload's leaf).
func holdsInOrderAnywhere(names, chain []string) bool {
	i := slices.Index(names, chain[0])
	return i >= 0 && holdsInOrder(names[i:], chain)
}
