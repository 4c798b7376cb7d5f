package uproberecv

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/process"
)

// target is a binary to evaluate: where it is, who it is, how to read it.
type target struct {
	// path names it in logs and to the probes' file_match.
	path string
	// attachPath reaches the same inode from our mount namespace.
	attachPath string
	// file is its identity; Ino zero when unknown, then Size and ModTime
	// are too and nothing is cached for it.
	file process.FileID
	open func() (*os.File, error)
}

// mappingTarget is the file behind mapping m of pid: opened through the
// process while it runs, else by path in ours when that is the same file.
// A process that dlopens a library, calls it and exits can be gone between
// the read of its mappings and the open of the library to plan or attach
// it; the library must still be attached, for its next process.
func mappingTarget(pid int, m *process.Mapping, file process.FileID) *target {
	return &target{path: m.Path, attachPath: process.MappedFilePath(pid, m), file: file,
		open: func() (*os.File, error) {
			f, err := process.OpenMapping(pid, m)
			if err == nil || !identified(file) {
				return f, err
			}
			if f, errOurs := openSame(m.Path, file); errOurs == nil {
				return f, nil
			}
			return nil, err
		}}
}

// fileTarget is the executable of an exec event, or the file of a mapping
// event, at path as pid sees it: opened through the process's root while it
// runs, else by path in ours when that is the same file (a process gone
// already, outside a container).
func fileTarget(pid int, path string, exe process.FileID) *target {
	attachPath := process.PathInRoot(pid, path)
	if fi, err := os.Stat(path); err == nil {
		if id, ok := process.FileIDOf(fi); ok && id.Same(exe) {
			attachPath = path
		}
	}
	return &target{path: path, attachPath: attachPath, file: exe, open: func() (*os.File, error) {
		if f, err := process.OpenInRoot(pid, path); err == nil {
			return f, nil
		}
		f, err := openSame(path, exe)
		if err != nil {
			return nil, fmt.Errorf("opening %s for pid %d: %w", path, pid, err)
		}
		return f, nil
	}}
}

// openSame opens path in our own root if it is still the file file. The
// path is another user's to place: opened without blocking (a FIFO planted
// there must not stall the tracker), and kept only when it is that file.
func openSame(path string, file process.FileID) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if id, err := process.StatFile(f); err != nil || !id.Same(file) {
		f.Close()
		return nil, errors.New("another file is at that path now")
	}
	return f, nil
}

// identified reports whether file carries a whole identity: inode, size and
// mtime, so a cached verdict about it can be trusted for the same file.
func identified(file process.FileID) bool { return file.Ino != 0 && !file.ModTime.IsZero() }

// attachTo makes sure the matched probes are attached to the binary tg, and
// that pid (0: none, the binary is pinned) holds it. It reports whether pid
// now holds the binary, and whether the binary is known to have nothing for
// the matched probes (from the negative cache or from reading it just now).
//
// The binary is read and attached without the tracker's lock: it is marked
// pending, evaluated, and the result committed under the lock. Whoever
// finds it pending waits for that result.
func (t *tracker) attachTo(pid int, tg *target, matched []*compiledProbe, at uint64, trigger string) (held, negative bool) {
	key := tg.file.FileKey
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return false, false
		}
		if p := t.pending[key]; p != nil {
			t.mu.Unlock()
			<-p.done
			continue
		}
		b := t.binaries[key]
		if b != nil && identified(tg.file) && identified(b.file) && !b.file.Same(tg.file) {
			// Changed in place since it was attached: its uprobes were
			// placed for other code, and go before new ones are placed
			// on the same inode.
			t.detachLocked(b, "the file changed", true)
			b = nil
		}
		var missing []*compiledProbe
		if b != nil {
			for _, p := range matched {
				if !b.evaluated[p.id] {
					missing = append(missing, p)
				}
			}
			if len(missing) == 0 {
				fresh := t.holdLocked(pid, b)
				attachedAt := b.attachedAt
				t.mu.Unlock()
				if fresh && at != 0 && attachedAt > int64(at) {
					// Another attach of this binary (another process, or
					// the file written into a watched directory) was under
					// way when this one came, whether its event was read
					// then or after that attach ended: its calls until
					// then missed. Once per process: an exec's scan of
					// its mappings finds the binary again.
					t.attachedLate(pid, trigger, time.Duration(attachedAt-int64(at)))
				}
				return pid != 0, false
			}
		}
		p := &pendingBinary{done: make(chan struct{}), pid: pid}
		t.pending[key] = p
		t.mu.Unlock()

		var again, attached bool
		if b != nil {
			held, again = t.addProbes(pid, tg, b, p, missing)
		} else {
			held, negative, attached = t.newBinary(pid, tg, p, matched)
		}
		if attached && at != 0 {
			t.mu.Lock()
			counted := p.released // its exit counted it already
			t.mu.Unlock()
			latency := time.Duration(ktime.MonotonicNanos() - int64(at))
			if p.callAt > int64(at) {
				t.attachCalls.record(beforeCallKey, time.Duration(p.callAt-int64(at)))
			}
			if counted {
				t.latency.record(trigger, latency)
			} else {
				t.attachedLate(pid, trigger, latency)
			}
		}
		if !again {
			return held, negative
		}
	}
}

// attachedLate records the latency of an attach that came after pid's
// exec or mapping, and counts pid when it exited meanwhile.
func (t *tracker) attachedLate(pid int, trigger string, latency time.Duration) {
	t.latency.record(trigger, latency)
	if pid != 0 && !process.Running(pid) {
		t.stats.exitedBeforeAttach.Add(1)
	}
}

// finishLocked ends the evaluation p of key: waiters go on.
func (t *tracker) finishLocked(key process.FileKey, p *pendingBinary) {
	delete(t.pending, key)
	close(p.done)
}

// pinning reports whether a binary: probe is among matched: such a binary
// stays attached without processes.
func pinning(matched []*compiledProbe) bool {
	for _, p := range matched {
		if p.cfg.Binary != "" {
			return true
		}
	}
	return false
}

// newBinary evaluates a binary not attached yet for pid and commits the
// result: a binary with uprobes that pid holds, or a negative verdict.
func (t *tracker) newBinary(pid int, tg *target, p *pendingBinary, matched []*compiledProbe) (held, negative, attached bool) {
	key := tg.file.FileKey
	if identified(tg.file) && t.negative != nil && t.negative.Contains(tg.file) {
		t.stats.negativeHits.Add(1)
		t.mu.Lock()
		t.finishLocked(key, p)
		t.mu.Unlock()
		return false, true, false
	}
	t.mu.Lock()
	// Other evaluations under way may add binaries too, and detached ones
	// keep their uprobes until closed: count them.
	full := len(t.binaries)+len(t.pending)+t.detacher.pending()-1 >= maxBinaries
	if full {
		t.finishLocked(key, p)
	}
	t.mu.Unlock()
	if full {
		t.logger.Warn("not attaching: too many binaries attached", zap.String("path", tg.path), zap.Int("limit", maxBinaries))
		return false, false, false
	}
	as, conclusive := t.evaluate(pid, tg, matched, &p.callAt)
	// Only a binary actually read and found wanting is cached: one whose
	// process exited before it could be opened may be fine.
	if len(as) == 0 && conclusive && identified(tg.file) && t.negative != nil {
		t.negative.Add(tg.file)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	t.finishLocked(key, p)
	if len(as) == 0 {
		return false, conclusive, false
	}
	pinned := pinning(matched)
	if t.closed || (p.released && !pinned && !t.retaining()) {
		// Nobody would hold it: the process exited or exec'd while its
		// binary was being attached, and nothing is retained.
		t.closeAttachments(tg.path, as)
		return false, false, false
	}
	b := &attachedBinary{key: key, file: tg.file, path: tg.path, evaluated: map[uint32]bool{}, holders: map[int]struct{}{}, pinned: pinned}
	for _, pr := range matched {
		b.evaluated[pr.id] = true
	}
	b.attachments = as
	b.attachedAt = ktime.MonotonicNanos()
	if pinned {
		// A binary: path replaced by a new file: the old inode's uprobes
		// are of no use any more.
		for _, o := range t.binaries {
			if !o.pinned || o.path != b.path {
				continue
			}
			if len(o.holders) == 0 {
				t.detachLocked(o, "replaced at its path", false)
			} else {
				// Still running: kept while it runs, then like any
				// binary whose last process exited.
				o.pinned = false
			}
		}
	}
	t.binaries[key] = b
	t.stats.attached.Add(1)
	if p.released {
		// Retained for the next process, like a binary whose last
		// process exited.
		if !pinned {
			t.idleLocked(b, t.opts.now())
		}
		return false, false, true
	}
	t.holdLocked(pid, b)
	return pid != 0, false, true
}

// addProbes evaluates probes not yet looked for in the attached binary b,
// and commits the result. again reports that b was detached meanwhile (its
// last process exited): the caller starts over.
func (t *tracker) addProbes(pid int, tg *target, b *attachedBinary, p *pendingBinary, missing []*compiledProbe) (held, again bool) {
	as, _ := t.evaluate(pid, tg, missing, &p.callAt)

	t.mu.Lock()
	defer t.mu.Unlock()
	t.finishLocked(tg.file.FileKey, p)
	if t.closed || t.binaries[tg.file.FileKey] != b {
		t.closeAttachments(tg.path, as)
		return false, !t.closed && !p.released
	}
	for _, pr := range missing {
		b.evaluated[pr.id] = true
	}
	b.attachments = append(b.attachments, as...)
	if pinning(missing) {
		b.pinned = true
	}
	if p.released {
		return false, false
	}
	t.holdLocked(pid, b)
	return pid != 0, false
}

// closeAttachments has as, attached for nobody, closed by the detacher;
// at once after close, which waited for the detacher already (the probes
// are closed next).
func (t *tracker) closeAttachments(path string, as []attachment) {
	if t.closed {
		closeNow(t.logger, path, as)
		return
	}
	t.detacher.detach(path, as)
}

// holdLocked makes pid a holder of b, and reports whether it was not one
// already.
func (t *tracker) holdLocked(pid int, b *attachedBinary) (fresh bool) {
	if pid == 0 {
		return false
	}
	_, had := b.holders[pid]
	b.holders[pid] = struct{}{}
	b.idleSince = time.Time{}
	h := t.held[pid]
	if h == nil {
		h = map[process.FileKey]struct{}{}
		t.held[pid] = h
	}
	h[b.key] = struct{}{}
	return !had
}
