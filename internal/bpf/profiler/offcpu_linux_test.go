package profiler

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestOffCPULoadsAndWeighsSleeps loads the sampler with off-CPU events (the
// verifier checks the sched_switch program and the CFI walk it shares) and
// sleeps on one locked thread: every sleep comes back as one event of that
// thread, blocked, weighted by about the time slept, with a kernel stack.
func TestOffCPULoadsAndWeighsSleeps(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{Frequency: 1, OffCPU: OffCPUOptions{Enabled: true, MinDuration: time.Millisecond, Probability: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const sleeps, sleep = 10, 20 * time.Millisecond
	tid := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The goroutine stays on this thread until it exits, which the
		// runtime then ends: no other goroutine sleeps on it.
		lockOSThread()
		tid <- unix.Gettid()
		for range sleeps {
			ts := unix.NsecToTimespec(int64(sleep))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
		}
	}()
	want := uint32(<-tid)
	<-done
	s.SetDeadline(time.Now().Add(500 * time.Millisecond))

	var smp Sample
	var events int
	var total time.Duration
	for s.Read(&smp) == nil {
		if smp.TID != want || !smp.OffCPU {
			continue
		}
		d := time.Duration(smp.OffCPUNs)
		if d < sleep {
			continue // the thread's other waits, in the runtime
		}
		if smp.Preempted {
			t.Errorf("a sleep reported as preempted")
		}
		if len(smp.Kernel) == 0 {
			t.Errorf("event without a kernel stack")
		}
		events++
		total += d
	}
	if events != sleeps {
		t.Fatalf("%d off-CPU events of at least %v of the sleeping thread, want %d", events, sleep, sleeps)
	}
	if total > sleeps*(sleep+5*time.Millisecond) {
		t.Fatalf("off-CPU total %v for %d sleeps of %v", total, sleeps, sleep)
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.OffCPUEvents < sleeps {
		t.Fatalf("counters %+v: fewer events than read", c)
	}
	t.Logf("%d events, %v off CPU; counters: events %d, short %d, full %d", events, total, c.OffCPUEvents, c.OffCPUShort, c.OffCPUFull)
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
	if s.objs.OffCpuSwitch != nil {
		t.Fatal("off-CPU program loaded while disabled")
	}
	if _, _, err := s.OffCPURunStats(); err == nil {
		t.Fatal("program stats of a disabled off-CPU program")
	}
}

func lockOSThread() { runtime.LockOSThread() }
