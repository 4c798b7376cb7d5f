package scopeprobe

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Why expedite: a uprobe registration that is the kernel's first writer of
// dup_mmap_sem after a quiet spell waits in rcu_sync_enter for a normal RCU
// grace period (4–25 ms here). With /sys/kernel/rcu_expedited set, the same
// wait is an expedited grace period (0.1–0.5 ms). The knob is global: while
// it is set, every synchronize_rcu on the host is expedited (an IPI to each
// CPU instead of waiting for their ticks), so it is set only from the start
// of an Attach to its first registration, and only when it was clear: a
// writer right after another one does not wait.

// rcuExpeditedPath is the kernel's global switch between normal and
// expedited RCU grace periods.
const rcuExpeditedPath = "/sys/kernel/rcu_expedited"

// ExpediteStats count what expediting did.
type ExpediteStats struct {
	// Raised counts attaches around which the knob was set and cleared.
	Raised uint64
	// AlreadySet counts attaches that found the knob set by someone else,
	// and left it alone.
	AlreadySet uint64
	// Errors counts reads or writes of the knob that failed.
	Errors uint64
	// SetFor is how long the knob was set by us in all: the time the whole
	// host's grace periods were expedited on our account.
	SetFor time.Duration
}

// expediter sets rcu_expedited for the duration of registrations, counting
// overlapping ones so that the last to finish clears it.
type expediter struct {
	mu     sync.Mutex
	knob   *os.File
	active int
	// raised is whether the knob was clear when the first of the active
	// registrations began, so that we set it and must clear it.
	raised bool
	// since is when the knob was set, while raised.
	since time.Time

	nRaised, nAlready, nErrs atomic.Uint64
	setFor                   atomic.Int64 // nanoseconds
}

// openExpediter opens the knob for reading and writing, or says why it
// cannot be used.
func openExpediter() (*expediter, error) {
	knob, err := os.OpenFile(rcuExpeditedPath, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s to expedite uprobe registration (needs root and a writable /sys): %w", rcuExpeditedPath, err)
	}
	if normal, err := os.ReadFile("/sys/kernel/rcu_normal"); err == nil && bytes.HasPrefix(bytes.TrimSpace(normal), []byte("1")) {
		knob.Close()
		return nil, errors.New("expediting uprobe registration: /sys/kernel/rcu_normal is set, which overrides rcu_expedited")
	}
	return &expediter{knob: knob}, nil
}

// begin sets the knob unless it was set already or another registration
// set it; end undoes begin.
func (e *expediter) begin() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.active++
	if e.active > 1 {
		return
	}
	var b [4]byte
	n, err := e.knob.ReadAt(b[:], 0)
	if n == 0 {
		e.nErrs.Add(1)
		return
	}
	_ = err // io.EOF after a short read of a sysfs file
	if b[0] != '0' {
		e.nAlready.Add(1)
		return
	}
	if _, err := e.knob.WriteAt([]byte("1"), 0); err != nil {
		e.nErrs.Add(1)
		return
	}
	e.raised = true
	e.since = time.Now()
	e.nRaised.Add(1)
}

func (e *expediter) end() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.active--
	if e.active > 0 || !e.raised {
		return
	}
	e.raised = false
	if _, err := e.knob.WriteAt([]byte("0"), 0); err != nil {
		e.nErrs.Add(1)
	}
	e.setFor.Add(int64(time.Since(e.since)))
}

func (e *expediter) stats() ExpediteStats {
	return ExpediteStats{Raised: e.nRaised.Load(), AlreadySet: e.nAlready.Load(), Errors: e.nErrs.Load(),
		SetFor: time.Duration(e.setFor.Load())}
}

// close clears the knob if a registration left it set, and closes it.
func (e *expediter) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.raised {
		e.raised = false
		e.knob.WriteAt([]byte("0"), 0)
	}
	return e.knob.Close()
}
