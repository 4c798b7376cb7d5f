//go:build linux && (amd64 || arm64)

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

// rcuKnob is the process's one handle on the knob, shared by every Probes
// that expedites: overlapping attaches of two receivers then set and clear
// it once, and one's end never clears it under the other's registration.
type rcuKnob struct {
	mu    sync.Mutex
	file  *os.File
	users int
	// active counts the registrations between begin and end.
	active int
	// raisedBy is the expediter that found the knob clear when the first
	// of the active registrations began and set it, so it must be cleared;
	// nil when not raised.
	raisedBy *expediter
	// since is when the knob was set, while raised.
	since time.Time
}

var theKnob rcuKnob

// expediter sets rcu_expedited for the duration of registrations, and
// counts what it did for one Probes.
type expediter struct {
	knob *rcuKnob

	nRaised, nAlready, nErrs atomic.Uint64
	setFor                   atomic.Int64 // nanoseconds
}

// openExpediter opens the knob for reading and writing, or says why it
// cannot be used.
func openExpediter() (*expediter, error) {
	k := &theKnob
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.users == 0 {
		file, err := os.OpenFile(rcuExpeditedPath, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("opening %s to expedite uprobe registration (needs root and a writable /sys): %w", rcuExpeditedPath, err)
		}
		if normal, err := os.ReadFile("/sys/kernel/rcu_normal"); err == nil && bytes.HasPrefix(bytes.TrimSpace(normal), []byte("1")) {
			file.Close()
			return nil, errors.New("expediting uprobe registration: /sys/kernel/rcu_normal is set, which overrides rcu_expedited")
		}
		k.file = file
	}
	k.users++
	return &expediter{knob: k}, nil
}

// begin sets the knob unless it was set already or another registration
// set it; end undoes begin.
func (e *expediter) begin() {
	k := e.knob
	k.mu.Lock()
	defer k.mu.Unlock()
	k.active++
	if k.active > 1 {
		return
	}
	var b [4]byte
	n, err := k.file.ReadAt(b[:], 0)
	if n == 0 {
		e.nErrs.Add(1)
		return
	}
	_ = err // io.EOF after a short read of a sysfs file
	if b[0] != '0' {
		e.nAlready.Add(1)
		return
	}
	if _, err := k.file.WriteAt([]byte("1"), 0); err != nil {
		e.nErrs.Add(1)
		return
	}
	k.raisedBy, k.since = e, time.Now()
	e.nRaised.Add(1)
}

func (e *expediter) end() {
	k := e.knob
	k.mu.Lock()
	defer k.mu.Unlock()
	k.active--
	if k.active == 0 && k.raisedBy != nil {
		k.clear()
	}
}

// clear puts the knob back to 0 and charges the time it was set to the
// expediter that set it. k.mu is held.
func (k *rcuKnob) clear() {
	by := k.raisedBy
	k.raisedBy = nil
	if _, err := k.file.WriteAt([]byte("0"), 0); err != nil {
		by.nErrs.Add(1)
	}
	by.setFor.Add(int64(time.Since(k.since)))
}

func (e *expediter) stats() ExpediteStats {
	return ExpediteStats{Raised: e.nRaised.Load(), AlreadySet: e.nAlready.Load(), Errors: e.nErrs.Load(),
		SetFor: time.Duration(e.setFor.Load())}
}

// close drops this user of the knob; the last one clears the knob if a
// registration left it set, and closes it.
func (e *expediter) close() error {
	k := e.knob
	k.mu.Lock()
	defer k.mu.Unlock()
	k.users--
	if k.users > 0 {
		return nil
	}
	if k.raisedBy != nil {
		k.clear()
	}
	err := k.file.Close()
	k.file = nil
	return err
}
