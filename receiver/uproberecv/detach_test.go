package uproberecv

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// meetingAttachment's Close waits, as the kernel's grace periods make an
// unregistration wait, until every other one of its group is closing too:
// closed one by one, they never meet.
type meetingAttachment struct {
	all      *sync.WaitGroup
	met      chan struct{}
	timedOut *bool
	mu       *sync.Mutex
}

func (*meetingAttachment) Links() int { return 1 }

func (a *meetingAttachment) Close() error {
	a.all.Done()
	select {
	case <-a.met:
	case <-time.After(5 * time.Second):
		a.mu.Lock()
		*a.timedOut = true
		a.mu.Unlock()
	}
	return nil
}

// TestDetacherClosesInParallel hands the detacher three binaries whose
// closes each wait for the others to begin: they complete only when closed
// in parallel (a shutdown with 257 binaries took 28 s one by one), and
// wait returns once all are closed.
func TestDetacherClosesInParallel(t *testing.T) {
	const binaries = 3
	var all sync.WaitGroup
	all.Add(binaries)
	met := make(chan struct{})
	go func() { all.Wait(); close(met) }()
	var mu sync.Mutex
	timedOut := false
	d := newDetacher(zaptest.NewLogger(t))
	for range binaries {
		d.detach("bin", []attachment{&meetingAttachment{all: &all, met: met, timedOut: &timedOut, mu: &mu}})
	}
	d.wait()
	if n := d.pending(); n != 0 {
		t.Errorf("%d binaries pending after wait", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if timedOut {
		t.Fatal("the closes did not run at the same time")
	}
}
