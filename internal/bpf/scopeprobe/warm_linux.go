//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Why a warmer: every uprobe registration, perf-event or uprobe_multi,
// takes the kernel's dup_mmap_sem (a percpu rw semaphore) for writing. The
// first writer after a quiet spell waits in rcu_sync_enter for a normal RCU
// grace period (4–25 ms measured here, under load more); a writer within a
// grace period of the last one's exit finds the semaphore still in its slow
// mode and does not wait (0.03–0.2 ms). With /sys/kernel/rcu_expedited set
// the first one took 0.2 ms too, which names the grace period as the cost.
// A warmer is such a writer, every period: it registers a uprobe on a
// memfd nothing maps (no process is touched) and unregisters it again, so
// a binary's attach right after its exec does not wait for a grace period.

// WarmerStats count what a Warmer did.
type WarmerStats struct {
	// Writes counts registrations and unregistrations made.
	Writes uint64
	// Skipped counts periods without one: all closers were busy.
	Skipped uint64
	// Errors counts registrations the kernel refused.
	Errors uint64
}

// Warmer keeps uprobe registration fast: see StartWarmer.
type Warmer struct {
	probes *Probes
	exe    *link.Executable
	file   *os.File
	stop   chan struct{}
	done   chan struct{}
	// toClose feeds the closers, a fixed set of goroutines: each
	// unregistration waits for RCU grace periods in the kernel
	// (40–200 ms), on a thread of its own.
	toClose chan link.Link
	closing sync.WaitGroup
	writes  atomic.Uint64
	skipped atomic.Uint64
	errs    atomic.Uint64
	once    sync.Once
}

// StartWarmer registers a uprobe_multi uprobe on a file nothing maps
// every other period and unregisters it in the periods between, with at
// most maxClosing unregistrations waiting in the kernel at a time, until
// Close. A period shorter than the kernel's shortest grace period keeps
// every Attach from waiting for one. The cost is CPU: a registration takes
// about 10 µs, an unregistration 70–90 µs (its wait for RCU Tasks Trace and
// SRCU grace periods is mostly context switches), and each period's wakeup
// 40–50 µs on a loaded 2-vCPU VM.
func (p *Probes) StartWarmer(period time.Duration, maxClosing int) (*Warmer, error) {
	if period <= 0 || maxClosing <= 0 {
		return nil, fmt.Errorf("starting uprobe warmer: period %s and closers %d must be positive", period, maxClosing)
	}
	if p.entryMulti == nil {
		// Perf-event uprobes on a memfd were refused here, and slowed the
		// attaches meanwhile.
		return nil, fmt.Errorf("starting uprobe warmer: needs uprobe_multi links (6.6+): %w", ebpf.ErrNotSupported)
	}
	fd, err := unix.MemfdCreate("bpfcol-uprobe-warm", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("starting uprobe warmer: creating memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "bpfcol-uprobe-warm")
	// A uprobe must lie inside the file; the content is never run.
	if _, err := f.Write(make([]byte, os.Getpagesize())); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting uprobe warmer: filling memfd: %w", err)
	}
	exe, err := link.OpenExecutable("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("starting uprobe warmer: %w", err)
	}
	w := &Warmer{probes: p, exe: exe, file: f, stop: make(chan struct{}), done: make(chan struct{}),
		toClose: make(chan link.Link)}
	// The first registration tells whether the kernel takes uprobes on a
	// memfd at all.
	l, err := w.register()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("starting uprobe warmer: %w", err)
	}
	w.closing.Add(maxClosing)
	for range maxClosing {
		go w.closer()
	}
	go w.run(period, l)
	return w, nil
}

// warmOffset is where in the memfd the uprobe goes: not 0, which cilium
// takes for "look the symbol up".
const warmOffset = 64

func (w *Warmer) register() (link.Link, error) {
	w.writes.Add(1)
	return w.exe.UprobeMulti(nil, w.probes.entryMulti, &link.UprobeMultiOptions{Addresses: []uint64{warmOffset}})
}

func (w *Warmer) run(period time.Duration, held link.Link) {
	defer close(w.done)
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-w.stop:
			if held != nil {
				held.Close()
			}
			return
		case <-ticker.C:
		}
		// One writer a period, registration and unregistration in turn:
		// a writer within a grace period of the last keeps the kernel's
		// fast mode for another one, and two at once buy no more than one.
		if held != nil {
			select {
			case w.toClose <- held:
				w.writes.Add(1)
				held = nil
			default:
				w.skipped.Add(1)
			}
			continue
		}
		l, err := w.register()
		if err != nil {
			w.errs.Add(1)
			continue
		}
		held = l
	}
}

// closer unregisters the links it is handed until the warmer stops.
func (w *Warmer) closer() {
	defer w.closing.Done()
	for {
		select {
		case l := <-w.toClose:
			l.Close()
		case <-w.stop:
			return
		}
	}
}

// Stats returns what the warmer did so far.
func (w *Warmer) Stats() WarmerStats {
	return WarmerStats{Writes: w.writes.Load(), Skipped: w.skipped.Load(), Errors: w.errs.Load()}
}

// Close stops the warmer and waits for its unregistrations. It is safe to
// call more than once.
func (w *Warmer) Close() error {
	var err error
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		w.closing.Wait()
		err = w.file.Close()
	})
	return err
}
