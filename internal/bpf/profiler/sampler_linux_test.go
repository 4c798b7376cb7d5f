//go:build linux && (amd64 || arm64)

package profiler

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

func TestParseCPUList(t *testing.T) {
	got, err := parseCPUList("0-2,5,7-8")
	if err != nil {
		t.Fatal(err)
	}
	want := []int{0, 1, 2, 5, 6 + 1, 8}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if _, err := parseCPUList("0-x"); err == nil {
		t.Fatal("want an error for a bad list")
	}
}

// TestSamplerSeesBusyThread spins this test's own thread and expects samples
// of it, with a user stack starting at the sampled IP.
func TestSamplerSeesBusyThread(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{Frequency: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	spinThread(t)

	self := uint32(os.Getpid())
	deadline := time.Now().Add(5 * time.Second)
	var own, withUser int
	var smp Sample
	go func() { <-time.After(time.Until(deadline)); s.reader.SetDeadline(time.Now()) }()
	for own < 20 && time.Now().Before(deadline) {
		if err := s.Read(&smp); err != nil {
			t.Fatalf("read: %v", err)
		}
		if smp.PID != self {
			continue
		}
		own++
		if len(smp.User) > 0 && smp.User[0] == smp.UserIP && smp.LeafWordsValid {
			withUser++
		}
	}
	if own < 20 {
		t.Fatalf("only %d samples of this process in 5s at 99 Hz", own)
	}
	if withUser < own*9/10 {
		t.Fatalf("%d of %d samples have a user stack starting at the IP", withUser, own)
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Samples < uint64(own) {
		t.Fatalf("counter says %d samples, read %d of ours", c.Samples, own)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Read(&smp); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v, want ErrClosed", err)
	}
}

// TestStopFlushReadsEverythingRecorded fills a small ringbuf from a busy
// thread without reading it, then stops the sampler: nothing is recorded
// after Stop, the counters are still readable, and Flush lets Read return
// every recorded sample before ErrFlushed.
func TestStopFlushReadsEverythingRecorded(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{Frequency: 1000, RingBufferBytes: 16 * recordSize})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	spinThread(t)
	time.Sleep(500 * time.Millisecond)
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	stopped, err := s.Counters()
	if err != nil {
		t.Fatalf("counters after Stop: %v", err)
	}
	if stopped.Samples == 0 || stopped.DroppedRingbuf == 0 {
		t.Fatalf("counters %+v: want samples recorded and dropped by a full ringbuf", stopped)
	}
	time.Sleep(100 * time.Millisecond)
	if err := s.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	var smp Sample
	var read uint64
	for {
		err := s.Read(&smp)
		if errors.Is(err, ErrFlushed) {
			break
		}
		if err != nil {
			t.Fatalf("read after flush: %v", err)
		}
		read++
	}
	after, err := s.Counters()
	if err != nil {
		t.Fatalf("counters after the drain: %v", err)
	}
	t.Logf("recorded %d, dropped by the ringbuf %d, read after Stop+Flush %d", stopped.Samples, stopped.DroppedRingbuf, read)
	if after.Samples != stopped.Samples || after.DroppedRingbuf != stopped.DroppedRingbuf {
		t.Errorf("counters moved after Stop: %+v, then %+v", stopped, after)
	}
	if read != stopped.Samples {
		t.Errorf("read %d samples after Stop and Flush, the sampler recorded %d", read, stopped.Samples)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Read(&smp); !errors.Is(err, ErrClosed) {
		t.Errorf("read after Close: %v, want ErrClosed", err)
	}
}

// TestFirstSampleWakesReader gives the sampler a ringbuf that a busy thread
// at 20 Hz would take minutes to fill halfway, and a read deadline far
// away: the reader, not woken for later samples, must still get the first
// sample as soon as it is taken instead of at the deadline.
func TestFirstSampleWakesReader(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{Frequency: 20, RingBufferBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	spinThread(t)
	// At the deadline Read returns what the ringbuf holds: only a read
	// that returned before it was woken.
	deadline := time.Now().Add(20 * time.Second)
	s.SetDeadline(deadline)
	var smp Sample
	if err := s.Read(&smp); err != nil {
		t.Fatalf("first read: %v, want the first sample before the deadline", err)
	}
	if !time.Now().Before(deadline) {
		t.Fatal("the first sample was read at the deadline: it did not wake the reader")
	}
	if smp.TID == 0 {
		t.Fatalf("first sample %+v: no thread", smp)
	}
}

// spinThread keeps a thread of this process busy on a CPU until the test
// ends, for the sampler to find.
func spinThread(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		runtime.LockOSThread()
		x := 0
		for {
			select {
			case <-stop:
				return
			default:
				for i := 0; i < 1_000_000; i++ {
					x += i
				}
			}
		}
	}()
}
