package interp

import (
	"errors"
	"fmt"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
)

// A process whose runtime was not set up when it was first looked at (a
// JVM has mapped libjvm but not created its code cache yet) is looked at
// again every retryDelay, up to maxRetries times, with the mappings it was
// last seen with.
const (
	retryDelay = 250 * time.Millisecond
	maxRetries = 40
)

// notReady is a process waiting to be attached again.
type notReady struct {
	maps  []process.Mapping
	tries int
}

// retryLater notes that pid's attach by a client found its runtime not set
// up; it reports false, with the error to refuse it with, once pid was
// tried too often. Only Run's goroutine calls it.
func (m *Manager) retryLater(pid uint32, maps []process.Mapping, err error) (bool, error) {
	if m.notReady == nil {
		m.notReady = map[uint32]notReady{}
	}
	nr := m.notReady[pid]
	if nr.tries >= maxRetries {
		delete(m.notReady, pid)
		return false, fmt.Errorf("%w (still after %v)", err, time.Duration(maxRetries)*retryDelay)
	}
	m.notReady[pid] = notReady{maps: maps, tries: nr.tries + 1}
	return true, nil
}

// retryDue queues the processes waiting to be attached again, unless newer
// news of them is already queued.
func (m *Manager) retryDue() {
	m.pendMu.Lock()
	for pid, nr := range m.notReady {
		if _, ok := m.pending[pid]; !ok {
			m.pending[pid] = nr.maps
		}
	}
	m.pendMu.Unlock()
}

// retryTimer returns a channel that fires when waiting processes are due,
// nil when none waits.
func (m *Manager) retryTimer() <-chan time.Time {
	if len(m.notReady) == 0 {
		return nil
	}
	return time.After(retryDelay)
}

// isNotReady reports whether err says the runtime is not set up yet.
func isNotReady(err error) bool { return errors.Is(err, ErrNotReady) }
