package uproberecv

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/process"
)

// scanResult is what one scan of a process found.
type scanResult struct {
	// gone: the process's mappings could not be read.
	gone bool
	// dynamic: ld.so is mapped, so libraries may still come.
	dynamic bool
	// matched counts mapped files some probe matched; negative those of
	// them known to have nothing for it; held those pid now holds.
	matched, negative, held int
	// negativeKey is the last file found wanting.
	negativeKey process.FileKey
}

// complete reports whether neither a rescan nor another process of exe
// could find more: every matched file was found wanting, and either no
// library can come (static), or all probes name the one exact path that
// is exe itself.
func (r scanResult) complete(t *tracker, exe process.FileKey) bool {
	if r.matched == 0 || r.negative != r.matched {
		return false
	}
	return !r.dynamic || (t.onePath && r.matched == 1 && r.negativeKey == exe)
}

// exec handles a process that replaced its image with exe (Ino zero when
// unknown; path as execve resolved it, "" when unknown) at ktime: who it is
// is noted first, what it held is released, then the executable is
// attached straight from the event (a short process may be gone before
// /proc could be read), the process scanned and, without mapping events,
// scanned again after ld.so had time to map its libraries.
func (t *tracker) exec(pid int, exe process.FileID, path string, at uint64) {
	if pid == os.Getpid() {
		return
	}
	// First: short processes are gone soon, and their records are read
	// after that.
	info := t.infos.Refresh(pid)
	if info.ExePath == "" && filepath.IsAbs(path) {
		info = process.Info{ExePath: path, ExeName: filepath.Base(path)}
		t.infos.Put(pid, info)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.releaseLocked(pid, false)
	t.execGen[pid]++
	gen := t.execGen[pid]
	t.mu.Unlock()

	if t.quiet != nil && exe.Ino != 0 && t.quiet.Contains(exe) {
		t.stats.quietExecs.Add(1)
		t.stats.negativeHits.Add(1)
		return
	}
	if identified(exe) && filepath.IsAbs(path) {
		if matched := t.matching(pid, path); len(matched) > 0 {
			t.attachTo(pid, fileTarget(pid, path, exe), matched, at, triggerExec)
		}
	}
	res := t.scan(pid, at, triggerExec)
	if res.gone {
		t.lostExec(pid, exe, info)
		return
	}
	complete := res.complete(t, exe.FileKey)
	if t.quiet != nil && exe.Ino != 0 && complete {
		t.quiet.Add(exe)
	}
	if !res.dynamic || complete || t.opts.mappingEvents {
		return
	}
	for _, d := range rescanDelays {
		t.mu.Lock()
		if t.closed {
			// Closed while scanning: close stopped the timers already.
			t.mu.Unlock()
			return
		}
		var timer *time.Timer
		timer = time.AfterFunc(d, func() {
			t.mu.Lock()
			delete(t.timers, timer)
			current := !t.closed && t.execGen[pid] == gen
			t.mu.Unlock()
			if current {
				t.scan(pid, 0, "")
			}
		})
		t.timers[timer] = struct{}{}
		t.mu.Unlock()
	}
}

// absoluteExecPath returns the absolute path, as the process sees it, of
// the executable exe that pid exec'd by path. A relative path (execve given
// ./prog) is joined to the working directory of pid, or of its parent ppid
// when pid is gone already (a short process), and kept only when the file
// there is exe. Otherwise path is returned as it is, and counted.
func (t *tracker) absoluteExecPath(pid, ppid int, path string, exe process.FileID) string {
	if path == "" || filepath.IsAbs(path) || !identified(exe) {
		return path
	}
	for _, p := range []int{pid, ppid} {
		if p <= 0 {
			continue
		}
		cwd, err := process.WorkingDir(p)
		if err != nil || !filepath.IsAbs(cwd) {
			continue
		}
		abs := filepath.Join(cwd, path)
		// Through the process's root, as it sees the path; stat only, and
		// the identity decides.
		fi, err := os.Stat(process.PathInRoot(p, abs))
		if err != nil {
			continue
		}
		if id, ok := process.FileIDOf(fi); ok && id.Same(exe) {
			return abs
		}
	}
	t.stats.execPathsUnresolved.Add(1)
	return path
}

// lostExec counts a process gone before its mappings could be read, when
// its executable needed attaching: one a probe matches, not attached, not
// known to have nothing.
func (t *tracker) lostExec(pid int, exe process.FileID, info process.Info) {
	if info.ExePath == "" {
		return
	}
	matched := false
	for i := range t.probes {
		if t.probes[i].matches(pid, info.ExePath) {
			matched = true
		}
	}
	if !matched || (t.negative != nil && exe.Ino != 0 && t.negative.Contains(exe)) {
		return
	}
	t.mu.Lock()
	_, attached := t.binaries[exe.FileKey]
	t.mu.Unlock()
	if !attached {
		t.stats.exitedBeforeAttach.Add(1)
	}
}

// mapped handles pid mapping file executable at ktime (a library loaded
// by ld.so or dlopen); path is the file's path as pid sees it, or empty
// when the event did not carry it.
func (t *tracker) mapped(pid int, file process.FileID, path string, at uint64) {
	if pid == os.Getpid() || file.Ino == 0 {
		return
	}
	t.mu.Lock()
	b := t.binaries[file.FileKey]
	if b != nil && b.file.Same(file) && path == "" {
		// Known and unchanged: hold it. With a path, the probes it matches
		// are checked below.
		fresh := t.holdLocked(pid, b)
		attachedAt := b.attachedAt
		t.mu.Unlock()
		if fresh && at != 0 && attachedAt > int64(at) {
			// Mapped while its attach was under way, read after.
			t.attachedLate(pid, triggerMapping, time.Duration(attachedAt-int64(at)))
		}
		return
	}
	t.mu.Unlock()
	if b == nil && t.negative != nil && t.negative.Contains(file) {
		t.stats.negativeHits.Add(1)
		return
	}
	if path == "" {
		if t.unmatched != nil && t.unmatched.Contains(file) {
			return
		}
		// The mapping exists (the event comes after mmap returned): find
		// its path in the process's mappings.
		t.scanFor(pid, file, at)
		return
	}
	matched := t.matching(pid, path)
	if len(matched) == 0 {
		return
	}
	// Opened through the process's root while it runs, else by path in
	// ours: a process that maps a library and exits at once is gone
	// before the event is read, and its library must still be attached
	// (for the next process, and to count the loss).
	t.attachTo(pid, fileTarget(pid, path, file), matched, at, triggerMapping)
}

// scanFor reads pid's mappings for the one of file and handles it.
func (t *tracker) scanFor(pid int, file process.FileID, at uint64) {
	maps, err := process.ReadMappings(pid)
	if err != nil {
		t.stats.mappingsUnnamed.Add(1)
		return
	}
	t.stats.scans.Add(1)
	for i := range maps {
		m := &maps[i]
		if !m.File() || !m.Executable() || m.Key() != file.FileKey {
			continue
		}
		matched := t.matching(pid, m.Path)
		if len(matched) == 0 {
			if t.unmatched != nil {
				t.unmatched.Add(file)
			}
			return
		}
		t.attachTo(pid, mappingTarget(pid, m, file), matched, at, triggerMapping)
		return
	}
	t.stats.mappingsUnnamed.Add(1)
}

func (t *tracker) matching(pid int, path string) []*compiledProbe {
	var matched []*compiledProbe
	for j := range t.probes {
		if t.probes[j].matches(pid, path) {
			matched = append(matched, &t.probes[j])
		}
	}
	return matched
}

// exit releases everything the process held; its Info stays for one
// report interval, for its records still on their way.
func (t *tracker) exit(pid int) {
	now := t.opts.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releaseLocked(pid, true)
	delete(t.execGen, pid)
	t.exited = append(t.exited, exitedProcess{pid: pid, at: now})
	t.expireInfosLocked(now)
}

// expireInfosLocked forgets the Info of processes exited longer ago than
// infoLinger that did not come back (a reused pid that exec'd).
func (t *tracker) expireInfosLocked(now time.Time) {
	linger := t.opts.infoLinger
	n := 0
	for n < len(t.exited) && now.Sub(t.exited[n].at) > linger {
		pid := t.exited[n].pid
		if _, alive := t.execGen[pid]; !alive {
			t.infos.Forget(pid)
		}
		n++
	}
	t.exited = t.exited[n:]
}

// releaseLocked drops pid from every binary it holds, retaining or
// detaching binaries nobody holds any more, and from the evaluations
// under way for it. exited counts an evaluation under way as a loss.
func (t *tracker) releaseLocked(pid int, exited bool) {
	for _, p := range t.pending {
		if p.pid == pid && !p.released {
			p.released = true
			if exited {
				t.stats.exitedBeforeAttach.Add(1)
			}
		}
	}
	now := t.opts.now()
	for key := range t.held[pid] {
		b := t.binaries[key]
		if b == nil {
			continue
		}
		delete(b.holders, pid)
		if len(b.holders) == 0 {
			t.idleLocked(b, now)
		}
	}
	delete(t.held, pid)
}

// idleLocked handles a binary whose last holder left: pinned ones stay,
// others are retained within retain's bounds or detached.
func (t *tracker) idleLocked(b *attachedBinary, now time.Time) {
	if b.pinned {
		return
	}
	if t.opts.retain.MaxBinaries <= 0 || t.opts.retain.MaxAge <= 0 {
		t.detachLocked(b, "its last process exited", false)
		return
	}
	b.idleSince = now
	idle := 0
	var oldest *attachedBinary
	for _, o := range t.binaries {
		if len(o.holders) > 0 || o.pinned || o.idleSince.IsZero() {
			continue
		}
		idle++
		if oldest == nil || o.idleSince.Before(oldest.idleSince) {
			oldest = o
		}
	}
	if idle > t.opts.retain.MaxBinaries {
		t.detachLocked(oldest, "evicted: retain.max_binaries binaries without a process", false)
		t.stats.evicted.Add(1)
	}
}

// sweep detaches retained binaries idle for longer than retain.max_age,
// and forgets the Info of processes long gone.
func (t *tracker) sweep() {
	now := t.opts.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.binaries {
		if len(b.holders) == 0 && !b.pinned && !b.idleSince.IsZero() && now.Sub(b.idleSince) > t.opts.retain.MaxAge {
			t.detachLocked(b, "evicted: idle for retain.max_age", false)
			t.stats.evicted.Add(1)
		}
	}
	t.expireInfosLocked(now)
}

// detachLocked forgets b and has its uprobes closed: at once when now,
// else by the detacher, so that neither the lock nor the caller (the event
// loop) waits for the kernel's unregistration.
func (t *tracker) detachLocked(b *attachedBinary, why string, now bool) {
	if now {
		closeNow(t.logger, b.path, b.attachments)
	} else {
		t.closeAttachments(b.path, b.attachments)
	}
	for pid := range b.holders {
		delete(t.held[pid], b.key)
	}
	delete(t.binaries, b.key)
	t.stats.detached.Add(1)
	t.logger.Debug("detached binary", zap.String("path", b.path), zap.String("reason", why))
}

// Triggers of an attach, for its latency.
const (
	triggerExec    = "exec"
	triggerMapping = "mapping"
)

// scan reads the process's mappings and attaches to every matching binary.
// at is the ktime of the event that asked for it (zero for none), trigger
// its kind: an attach it makes counts toward that trigger's latency.
func (t *tracker) scan(pid int, at uint64, trigger string) (res scanResult) {
	maps, err := process.ReadMappings(pid)
	if err != nil {
		res.gone = true
		return res // gone, or a kernel thread
	}
	t.stats.scans.Add(1)
	seen := map[process.FileKey]bool{}
	for i := range maps {
		m := &maps[i]
		if !m.File() || !m.Executable() {
			continue
		}
		if strings.Contains(m.Path, "/ld-") {
			res.dynamic = true
		}
		key := m.Key()
		if seen[key] {
			continue
		}
		seen[key] = true
		matched := t.matching(pid, m.Path)
		if len(matched) == 0 {
			continue
		}
		res.matched++
		file, err := process.StatMapping(pid, m)
		if err != nil {
			file = process.FileID{FileKey: key}
		}
		held, negative := t.attachTo(pid, mappingTarget(pid, m, file), matched, at, trigger)
		if negative {
			res.negative++
			res.negativeKey = key
		}
		if held {
			res.held++
		}
	}
	return res
}
