//go:build linux && (amd64 || arm64)

package profiler

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestOffCPULoadsAndWeighsSleeps loads the sampler with off-CPU events (the
// verifier checks the sched_switch program and the CFI walk it shares) and
// sleeps on one locked thread: every sleep comes back as one event of that
// thread, blocked, weighted by about the time slept, with a kernel stack.
// Where the kernel has task work, the user stacks are walked there (the
// test says which path it took; BPFCOL_REQUIRE_TASK_WORK=1 requires task
// work).
func TestOffCPULoadsAndWeighsSleeps(t *testing.T) {
	testenv.RequireBPF(t)
	testOffCPUSleeps(t, testenv.Has(t, testenv.TaskWork, CheckOffCPUTaskWork()))
}

// TestOffCPUWalkInSwitch is TestOffCPULoadsAndWeighsSleeps with the
// programs of kernels without task work, which walk the user stack in
// sched_switch.
func TestOffCPUWalkInSwitch(t *testing.T) {
	testenv.RequireBPF(t)
	offCPUTaskWork = func() error { return errors.New("task work disabled by the test") }
	defer func() { offCPUTaskWork = CheckOffCPUTaskWork }()
	testOffCPUSleeps(t, false)
}

// checkNoWaitLost fails the test, apart from its weight checks, if thread
// tid of the workload lost a kept wait: the kernel did not report its
// switch-in to sched_switch, which no timing explains. It returns the
// waits of tid lost each with a switch-in of its own unreported: those
// its weight checks excuse.
func checkNoWaitLost(t *testing.T, s *Sampler, tid uint32) (excused int) {
	t.Helper()
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	lost, err := s.UnendedThreads()
	if err != nil {
		t.Fatal(err)
	}
	hidden, err := s.UnreportedThreads()
	if err != nil {
		t.Fatal(err)
	}
	// A wait is lost only with a switch-in the kernel never reported to
	// sched_switch, which no program sees: each loss of the thread needs
	// one of its own.
	if lost[tid] > hidden[tid] {
		t.Errorf("thread %d lost %d kept waits, with %d of its switch-ins unreported (%d switches unreported on the host, %d waits of the test process lost)",
			tid, lost[tid], hidden[tid], c.OffCPUUnreported, c.OffCPUUnended)
		return 0
	} else if lost[tid] > 0 {
		t.Logf("thread %d lost %d kept waits, each at a switch-in the kernel did not report (%d of them)", tid, lost[tid], hidden[tid])
	}
	return int(lost[tid])
}

func testOffCPUSleeps(t *testing.T, taskWork bool) {
	s, err := New(Options{Frequency: 1, PID: os.Getpid(), OffCPU: OffCPUOptions{Enabled: true, MinDuration: time.Millisecond, Probability: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.OffCPUTaskWork() != taskWork {
		t.Fatalf("user stacks walked by task work: %v, want %v", s.OffCPUTaskWork(), taskWork)
	}

	const sleeps, sleep = 10, 20 * time.Millisecond
	monotonic := func() uint64 {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		return uint64(ts.Nano())
	}
	tid := make(chan int, 1)
	windows := make([][2]uint64, 0, sleeps) // each sleep's start and end
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The goroutine stays on this thread until it exits, which the
		// runtime then ends: no other goroutine sleeps on it.
		lockOSThread()
		tid <- unix.Gettid()
		for range sleeps {
			ts := unix.NsecToTimespec(int64(sleep))
			start := monotonic()
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
			windows = append(windows, [2]uint64{start, monotonic()})
		}
	}()
	want := uint32(<-tid)
	<-done
	s.SetDeadline(time.Now().Add(500 * time.Millisecond))

	// An event is a sleep's when the thread left the CPU inside it; the
	// thread's other waits are the runtime's.
	inSleep := make([]time.Duration, sleeps)
	longest := make([]time.Duration, sleeps)
	longestPreempted := make([]bool, sleeps)
	var smp Sample
	noKernel := 0 // events without a kernel stack
	for s.Read(&smp) == nil {
		if smp.TID != want || !smp.OffCPU {
			continue
		}
		i := slices.IndexFunc(windows, func(w [2]uint64) bool { return smp.KtimeNs >= w[0] && smp.KtimeNs <= w[1] })
		if i < 0 {
			continue
		}
		if len(smp.Kernel) == 0 {
			noKernel++
		}
		if len(smp.User) == 0 {
			t.Errorf("event without a user stack")
		}
		// Besides the sleep, the thread may be preempted on its way out
		// of it (on a busy machine, for a millisecond or more).
		d := time.Duration(smp.OffCPUNs)
		if d > longest[i] {
			longest[i], longestPreempted[i] = d, smp.Preempted
		}
		inSleep[i] += d
	}
	for i, p := range longestPreempted {
		if p {
			t.Errorf("sleep %d: its longest wait, %v, reported as preempted", i, longest[i])
		}
	}
	excused := checkNoWaitLost(t, s, want)
	// Each sleep's events are held to what the sleep took by the thread's
	// own clock, which also bounds their total. Not to the nominal 20 ms:
	// on a busy host a sleep's wakeup waits for a CPU (ten sleeps took
	// over 320 ms once), and the events rightly weigh that wait. A wait
	// lost with its unreported switch-in (excused above) leaves its sleep
	// short, one sleep per such wait.
	var total time.Duration
	short := 0
	for i, d := range inSleep {
		slept := time.Duration(windows[i][1] - windows[i][0])
		if d > slept || (d < slept*95/100 && short >= excused) {
			c, _ := s.Counters()
			t.Fatalf("sleep %d of %v: %v off CPU recorded in it, %d sleeps short already with %d waits excused (counters %+v)", i, slept, d, short, excused, c)
		}
		if d < slept*95/100 {
			short++
			t.Logf("sleep %d of %v: %v off CPU recorded in it, its wait lost with a switch-in the kernel did not report", i, slept, d)
		}
		total += d
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.OffCPUEvents < sleeps {
		t.Fatalf("counters %+v: fewer events than read", c)
	}
	// Only a wait whose switch-in the kernel did not report goes out
	// without its kernel stack (walked at the switch-out, it is found at
	// the next one, the stack gone): each needs an unreported switch.
	if uint64(noKernel) > c.OffCPUUnreported {
		t.Errorf("%d events without a kernel stack, %d unreported switches", noKernel, c.OffCPUUnreported)
	}
	// The open-wait buckets count up and down in pairs: none went below
	// zero.
	var open [4096]uint32
	if err := s.objs.OffCpuOpen.Get(&open); err != nil {
		t.Fatal(err)
	}
	for i, n := range open {
		if n >= 1<<31 {
			t.Fatalf("open-wait bucket %d: %d, below zero", i, int32(n))
		}
	}
	walkTime, walks, err := s.OffCPUWalkStats()
	if err != nil {
		t.Fatal(err)
	}
	if taskWork && walks < sleeps {
		t.Fatalf("%d task work walks for %d sleeps", walks, sleeps)
	}
	if !taskWork && walks != 0 {
		t.Fatalf("%d task work walks without task work", walks)
	}
	t.Logf("%v off CPU in %d sleeps; counters: events %d, short %d, full %d, busy %d, refused %d, gone %d, switch-in unseen %d, unreported switches %d; %d walks in task work, %v",
		total, sleeps, c.OffCPUEvents, c.OffCPUShort, c.OffCPUFull, c.OffCPUBusy, c.OffCPUTaskWorkRefused, c.OffCPUGone, c.OffCPUUnended, c.OffCPUUnreported, walks, walkTime)
}

// TestOffCPUDisabledLoadsNoProgram checks that a sampler without off-CPU
// events does not load the sched_switch program.
func TestOffCPUDisabledLoadsNoProgram(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{Frequency: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.objs.OffCpuSwitch != nil || s.objs.OffCpuSwitchWalk != nil || s.offCPUSwitch != nil {
		t.Fatal("off-CPU program loaded while disabled")
	}
	if _, _, err := s.OffCPURunStats(); err == nil {
		t.Fatal("program stats of a disabled off-CPU program")
	}
}

func lockOSThread() { runtime.LockOSThread() }

// TestOffCPUThreadBound runs more sleeping threads than MaxThreads record
// slots: the bound holds, what it turns away is counted, and yet nearly
// every thread gets sampled, because slots above half the bound are handed
// back at each switch-in instead of staying with their threads.
func TestOffCPUThreadBound(t *testing.T) {
	testenv.RequireBPF(t)
	const maxThreads, threads, sleeps = 16, 64, 50
	s, err := New(Options{Frequency: 1, OffCPU: OffCPUOptions{Enabled: true, MinDuration: time.Millisecond, Probability: 1, MaxThreads: maxThreads}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	tids := make(chan uint32, threads)
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lockOSThread()
			tids <- uint32(unix.Gettid())
			for range sleeps {
				ts := unix.NsecToTimespec(int64(5 * time.Millisecond))
				for unix.Nanosleep(&ts, &ts) == unix.EINTR {
				}
			}
		}()
	}
	events := map[uint32]int{}
	for range threads {
		events[<-tids] = 0
	}
	var maxHeld uint64
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			var n uint64
			if err := s.objs.OffCpuSlotCount.Get(&n); err == nil && n > maxHeld {
				maxHeld = n
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-polled
	s.SetDeadline(time.Now().Add(500 * time.Millisecond))
	var smp Sample
	for s.Read(&smp) == nil {
		if n, ok := events[smp.TID]; ok && smp.OffCPU && smp.OffCPUNs >= uint64(5*time.Millisecond) {
			events[smp.TID] = n + 1
		}
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	var unsampled, total int
	for _, n := range events {
		total += n
		if n == 0 {
			unsampled++
		}
	}
	t.Logf("%d sleeps recorded of %d, %d of %d threads never; most slots held at once %d of %d; turned away %d",
		total, threads*sleeps, unsampled, threads, maxHeld, maxThreads, c.OffCPUFull)
	if maxHeld > maxThreads {
		t.Errorf("%d slots held at once, bound %d", maxHeld, maxThreads)
	}
	if c.OffCPUFull == 0 {
		t.Errorf("%d threads never hit the bound of %d slots", threads, maxThreads)
	}
	// Slots kept by their threads would leave at most maxThreads of them
	// sampled, a quarter (fewer: the host's sleeping threads hold slots
	// too: 48 of 64 unsampled, measured). Handed back, each of a thread's
	// sleeps is another chance at the share q of sleeps recorded: a
	// thread misses all of them with probability (1-q)^sleeps. Allowed:
	// that expectation, three standard deviations, and two threads for
	// the host's threads competing unevenly (0-2 measured at q 0.11-0.19).
	q := float64(total) / float64(threads*sleeps)
	miss := math.Pow(1-q, sleeps)
	allowed := int(float64(threads)*miss+3*math.Sqrt(float64(threads)*miss*(1-miss))) + 2
	if unsampled > allowed {
		t.Errorf("%d of %d threads never sampled, at most %d allowed (%.1f%% of sleeps recorded): slots stayed with the first threads", unsampled, threads, allowed, 100*q)
	}
}

// TestOffCPUWaitsOfOneSyscall writes 1 MiB into a pipe in one write(2)
// while a reader drains 64 KiB every 5 ms: the write waits about 16 times
// before it returns. Each wait is weighed: their total is the time the
// write took, less its few copies. With task work, the user stack of all
// of them is walked once, on the return, and the later waits' time is
// merged into the first's event.
func TestOffCPUWaitsOfOneSyscall(t *testing.T) {
	testenv.RequireBPF(t)
	testOffCPUOneSyscall(t, testenv.Has(t, testenv.TaskWork, CheckOffCPUTaskWork()))
}

// TestOffCPUWaitsOfOneSyscallWalkInSwitch is TestOffCPUWaitsOfOneSyscall
// with the walk in sched_switch: one event per wait.
func TestOffCPUWaitsOfOneSyscallWalkInSwitch(t *testing.T) {
	testenv.RequireBPF(t)
	offCPUTaskWork = func() error { return errors.New("task work disabled by the test") }
	defer func() { offCPUTaskWork = CheckOffCPUTaskWork }()
	testOffCPUOneSyscall(t, false)
}

func testOffCPUOneSyscall(t *testing.T, taskWork bool) {
	s, err := New(Options{Frequency: 1, PID: os.Getpid(), OffCPU: OffCPUOptions{Enabled: true, MinDuration: time.Millisecond, Probability: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	const chunk, total = 64 << 10, 1 << 20
	monotonic := func() uint64 {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		return uint64(ts.Nano())
	}
	// When each read returned: a wait of the writer ends at a read, so
	// none lasts longer than the longest gap between reads.
	var reads []uint64
	read := make(chan error, 1)
	go func() {
		lockOSThread()
		buf := make([]byte, chunk)
		for got := 0; got < total; {
			ts := unix.NsecToTimespec(int64(5 * time.Millisecond))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
			n, err := unix.Read(fds[0], buf)
			if err != nil {
				read <- err
				return
			}
			reads = append(reads, monotonic())
			got += n
		}
		read <- nil
	}()
	var tid int
	var start, end uint64
	done := make(chan error, 1)
	go func() {
		lockOSThread()
		tid = unix.Gettid()
		data := make([]byte, total)
		start = monotonic()
		n, err := unix.Write(fds[1], data)
		end = monotonic()
		if err == nil && n != total {
			err = errors.New("short write")
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("writing the pipe: %v", err)
	}
	unix.Close(fds[1])
	if err := <-read; err != nil {
		t.Fatalf("reading the pipe: %v", err)
	}
	s.SetDeadline(time.Now().Add(500 * time.Millisecond))
	var weight time.Duration
	var events int
	var smp Sample
	for s.Read(&smp) == nil {
		if smp.TID != uint32(tid) || !smp.OffCPU || smp.KtimeNs < start || smp.KtimeNs > end {
			continue
		}
		events++
		weight += time.Duration(smp.OffCPUNs)
		if len(smp.User) == 0 || len(smp.Kernel) == 0 {
			t.Errorf("event without both stacks: %d user, %d kernel frames", len(smp.User), len(smp.Kernel))
		}
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Duration(end - start)
	t.Logf("write took %v, %d events weigh %v; counters: events %d, merged %d, busy %d, short %d, switch-in unseen %d, unreported switches %d",
		took, events, weight, c.OffCPUEvents, c.OffCPUMerged, c.OffCPUBusy, c.OffCPUShort, c.OffCPUUnended, c.OffCPUUnreported)
	// A wait lost at a switch-in the kernel did not report weighs nothing:
	// it may take off at most the longest gap between reads.
	excused := checkNoWaitLost(t, s, uint32(tid))
	var longest time.Duration
	for i, prev := 0, start; i < len(reads); prev, i = reads[i], i+1 {
		longest = max(longest, time.Duration(reads[i]-prev))
	}
	if floor := took*90/100 - time.Duration(excused)*longest; weight < floor || weight > took {
		t.Fatalf("waits of the write weigh %v, the write took %v (%d waits lost, excused, each at most %v)", weight, took, excused, longest)
	}
	if taskWork && (events == 0 || c.OffCPUMerged < 8) {
		t.Fatalf("%d events, %d waits merged, for the about 16 waits of one write", events, c.OffCPUMerged)
	}
	if !taskWork && (events < 8 || c.OffCPUMerged != 0) {
		t.Fatalf("%d events, %d waits merged, for the about 16 waits of one write", events, c.OffCPUMerged)
	}
}

// TestOffCPUSamplesTheProbability checks that a switch-out is sampled with
// the configured probability: a thread that sleeps sleeps times, every
// sleep long enough to keep, gets about probability times its voluntary
// switch-outs as blocked events (the kernel counts its switch-outs), within
// five standard deviations of the binomial count.
func TestOffCPUSamplesTheProbability(t *testing.T) {
	testenv.RequireBPF(t)
	const probability, sleeps, sleep = 0.2, 1500, 200 * time.Microsecond
	s, err := New(Options{Frequency: 1, OffCPU: OffCPUOptions{Enabled: true, MinDuration: 10 * time.Microsecond, Probability: probability}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	type result struct {
		tid      int
		switches uint64
		err      error
	}
	res := make(chan result, 1)
	tids := make(chan int, 1)
	go func() {
		lockOSThread()
		tid := unix.Gettid()
		tids <- tid
		before, err := voluntarySwitches(tid)
		if err != nil {
			res <- result{err: err}
			return
		}
		for range sleeps {
			ts := unix.NsecToTimespec(int64(sleep))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
		}
		after, err := voluntarySwitches(tid)
		res <- result{tid, after - before, err}
	}()
	want := uint32(<-tids)
	// Read while the thread sleeps: every sampled wait on the host is
	// kept, more than the ringbuf holds for long.
	var events, preempted int
	var r result
	var smp Sample
	for done := false; ; {
		s.SetDeadline(time.Now().Add(50 * time.Millisecond))
		for s.Read(&smp) == nil {
			if smp.TID == want && smp.OffCPU {
				if smp.Preempted {
					preempted++
				} else {
					events++
				}
			}
		}
		if done {
			break
		}
		select {
		case r = <-res:
			// One more read, for the last events.
			done = true
		default:
		}
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.DroppedRingbuf > 0 || c.OffCPUFull > 0 || c.OffCPUBusy > 0 {
		t.Fatalf("events lost, the count cannot be judged: counters %+v", c)
	}
	n := float64(r.switches)
	mean, sd := n*probability, math.Sqrt(n*probability*(1-probability))
	t.Logf("%d blocked events (and %d preempted) of %d voluntary switch-outs: %.3f, want %v ± %.3f",
		events, preempted, r.switches, float64(events)/n, probability, 5*sd/n)
	if r.switches < sleeps {
		t.Fatalf("%d voluntary switch-outs for %d sleeps", r.switches, sleeps)
	}
	if math.Abs(float64(events)-mean) > 5*sd {
		t.Fatalf("%d blocked events of %d switch-outs sampled with probability %v: want %.0f ± %.0f",
			events, r.switches, probability, mean, 5*sd)
	}
}

// voluntarySwitches is how often thread tid of this process has left the
// CPU by blocking, as the kernel counts it.
func voluntarySwitches(tid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
	if err != nil {
		return 0, fmt.Errorf("reading thread status: %w", err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no voluntary_ctxt_switches in thread status")
}
