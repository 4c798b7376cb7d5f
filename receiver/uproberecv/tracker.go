package uproberecv

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/procwatch"
	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/internal/probesite"
	"github.com/bpfcol/bpfcol/internal/process"
)

const (
	// negativeTTL bounds how long a binary replaced with the same size and
	// mtime keeps its stale "nothing to instrument" verdict.
	negativeTTL = 10 * time.Minute
	// maxNegative bounds the negative cache.
	maxNegative = 4096
	// maxBinaries bounds the attached binaries; beyond it new ones are
	// refused (and logged) rather than growing kernel state without end.
	maxBinaries = 1024
)

// rescanDelays are when a dynamically linked process is scanned again
// after exec: the tracepoint fires before ld.so maps the libraries.
var rescanDelays = []time.Duration{50 * time.Millisecond, 500 * time.Millisecond}

// attacher puts uprobe sites on a binary; probesAttacher is the real one.
type attacher interface {
	Attach(path string, sites []scopeprobe.Site) (attachment, error)
}

// attachment is the uprobes one Attach put on a binary.
type attachment interface {
	// Links is how many uprobes it holds.
	Links() int
	// Close detaches them.
	Close() error
}

// probesAttacher attaches with the loaded scope probes.
type probesAttacher struct{ probes *scopeprobe.Probes }

func (p probesAttacher) Attach(path string, sites []scopeprobe.Site) (attachment, error) {
	a, err := p.probes.Attach(path, sites)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// compiledProbe is a validated ProbeConfig with its regex and pid set.
type compiledProbe struct {
	id    uint32
	cfg   ProbeConfig
	match *regexp.Regexp // nil: cfg.Binary is the exact path
	pids  map[int]bool   // nil: every process
}

func (p *compiledProbe) matches(pid int, path string) bool {
	if p.pids != nil && !p.pids[pid] {
		return false
	}
	if p.match != nil {
		return p.match.MatchString(path)
	}
	return path == p.cfg.Binary
}

// attachedBinary is one binary with uprobes on it, held by the processes
// that map it.
type attachedBinary struct {
	key         process.FileKey
	path        string
	attachments []attachment
	evaluated   map[uint32]bool // probes looked for, found or not
	holders     map[int]struct{}
}

// pendingBinary marks a binary being evaluated without the tracker's lock:
// others wanting it wait for done, so a binary is evaluated once however
// many processes exec it at the same time.
type pendingBinary struct {
	done chan struct{}
	// pid is the process the evaluation is for; released is set when it
	// exits or execs meanwhile, so it must not hold the result.
	pid      int
	released bool
}

// trackerStats are discovery's counts since start.
type trackerStats struct {
	// scans counts /proc/PID/maps reads.
	scans atomic.Int64
	// evaluations counts binaries opened and parsed for symbols.
	evaluations atomic.Int64
	// negativeHits counts binaries skipped thanks to the negative cache.
	negativeHits atomic.Int64
	// quietExecs counts execs answered from the exec event alone: a static
	// executable known to have nothing to instrument. Each is also a
	// negative hit.
	quietExecs atomic.Int64
	// attached and detached count binaries.
	attached, detached atomic.Int64
}

// tracker discovers processes mapping matching binaries, attaches each
// binary once and detaches it when the last process holding it exits.
type tracker struct {
	logger   *zap.Logger
	probes   []compiledProbe
	attacher attacher
	negative *negcache.Files // nil: every binary is evaluated afresh
	// quiet holds statically linked executables the negative cache
	// answered: such a process maps no other file at exec, so the exec
	// event's file identity settles it without reading /proc. Keyed by that
	// identity; nil with negative.
	quiet *negcache.Files
	// onePath: every probe names the same exact path (binary:).
	onePath bool
	infos   *processInfos
	stats   trackerStats

	// mu guards the maps below, never a file read, a parse or a syscall:
	// binaries are evaluated and attached outside it (pending), and the
	// result committed under it.
	mu       sync.Mutex
	closed   bool
	binaries map[process.FileKey]*attachedBinary
	pending  map[process.FileKey]*pendingBinary
	held     map[int]map[process.FileKey]struct{} // pid -> binaries it holds
	execGen  map[int]uint64                       // pid -> exec generation, for rescans
	timers   map[*time.Timer]struct{}
}

func newTracker(logger *zap.Logger, cfgs []ProbeConfig, a attacher, negative *negcache.Files, infos *processInfos) (*tracker, error) {
	t := &tracker{
		logger:   logger,
		attacher: a,
		negative: negative,
		infos:    infos,
		binaries: map[process.FileKey]*attachedBinary{},
		pending:  map[process.FileKey]*pendingBinary{},
		held:     map[int]map[process.FileKey]struct{}{},
		execGen:  map[int]uint64{},
		timers:   map[*time.Timer]struct{}{},
	}
	if negative != nil {
		t.quiet = negcache.NewFiles(negativeTTL, maxNegative)
	}
	t.onePath = true
	for i, c := range cfgs {
		p := compiledProbe{id: uint32(i), cfg: c}
		if c.FileMatch != "" {
			re, err := regexp.Compile(c.FileMatch)
			if err != nil {
				return nil, fmt.Errorf("probe %s: compiling file_match: %w", c.ID, err)
			}
			p.match = re
		}
		if c.FileMatch != "" || c.Binary != cfgs[0].Binary {
			t.onePath = false
		}
		if len(c.PIDs) > 0 {
			p.pids = map[int]bool{}
			for _, pid := range c.PIDs {
				p.pids[pid] = true
			}
		}
		t.probes = append(t.probes, p)
	}
	return t, nil
}

// scanAll scans every process in /proc.
func (t *tracker) scanAll() error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("listing /proc: %w", err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		t.scan(pid)
	}
	return nil
}

// scanResult is what one scan of a process found.
type scanResult struct {
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

// exeFile converts an exec event's identity into the negative cache's.
func exeFile(e procwatch.ExeFile) process.FileID {
	return process.FileID{FileKey: process.FileKey{Dev: e.Dev, Ino: e.Ino}, Size: e.Size, ModTime: e.ModTime}
}

// exec handles a process that replaced its image with exe (Ino zero when
// unknown): what it held is released, then it is scanned now and, when
// dynamically linked, again after ld.so had time to map its libraries.
func (t *tracker) exec(pid int, exe procwatch.ExeFile) {
	if pid == os.Getpid() {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.releaseLocked(pid)
	t.execGen[pid]++
	gen := t.execGen[pid]
	t.mu.Unlock()
	t.infos.forget(pid)

	if t.quiet != nil && exe.Ino != 0 && t.quiet.Contains(exeFile(exe)) {
		t.stats.quietExecs.Add(1)
		t.stats.negativeHits.Add(1)
		return
	}
	res := t.scan(pid)
	complete := res.complete(t, exeFile(exe).FileKey)
	if t.quiet != nil && exe.Ino != 0 && complete {
		t.quiet.Add(exeFile(exe))
	}
	if !res.dynamic || complete {
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
				t.scan(pid)
			}
		})
		t.timers[timer] = struct{}{}
		t.mu.Unlock()
	}
}

// exit releases everything the process held.
func (t *tracker) exit(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releaseLocked(pid)
	delete(t.execGen, pid)
}

// releaseLocked drops pid from every binary it holds, detaching binaries
// nobody holds any more, and from the evaluations under way for it.
func (t *tracker) releaseLocked(pid int) {
	for _, p := range t.pending {
		if p.pid == pid {
			p.released = true
		}
	}
	for key := range t.held[pid] {
		b := t.binaries[key]
		if b == nil {
			continue
		}
		delete(b.holders, pid)
		if len(b.holders) == 0 {
			t.detachLocked(b)
		}
	}
	delete(t.held, pid)
}

func (t *tracker) detachLocked(b *attachedBinary) {
	for _, a := range b.attachments {
		if err := a.Close(); err != nil {
			t.logger.Warn("detaching uprobes", zap.String("path", b.path), zap.Error(err))
		}
	}
	delete(t.binaries, b.key)
	t.stats.detached.Add(1)
	t.logger.Debug("detached binary: its last process exited", zap.String("path", b.path))
}

// scan reads the process's mappings and attaches to every matching binary.
func (t *tracker) scan(pid int) (res scanResult) {
	maps, err := process.ReadMappings(pid)
	if err != nil {
		return res // gone, or a kernel thread
	}
	t.stats.scans.Add(1)
	seen := map[process.FileKey]bool{}
	var infoRead bool
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
		var matched []*compiledProbe
		for j := range t.probes {
			if t.probes[j].matches(pid, m.Path) {
				matched = append(matched, &t.probes[j])
			}
		}
		if len(matched) == 0 {
			continue
		}
		res.matched++
		held, negative := t.binary(pid, m, key, matched)
		if negative {
			res.negative++
			res.negativeKey = key
		}
		if !held {
			continue
		}
		res.held++
		if !infoRead {
			// Records of short-lived processes are read after they exit:
			// remember who they were now.
			t.infos.refresh(pid)
			infoRead = true
		}
	}
	return res
}

// binary makes sure the matched probes are attached to the binary behind
// m, and that pid holds it. It reports whether pid now holds the binary,
// and whether the binary is known to have nothing for the matched probes
// (from the negative cache or from reading it just now).
//
// The binary is read and attached without the tracker's lock: it is marked
// pending, evaluated, and the result committed under the lock. Whoever
// finds it pending waits for that result.
func (t *tracker) binary(pid int, m *process.Mapping, key process.FileKey, matched []*compiledProbe) (held, negative bool) {
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
		var missing []*compiledProbe
		if b != nil {
			for _, p := range matched {
				if !b.evaluated[p.id] {
					missing = append(missing, p)
				}
			}
			if len(missing) == 0 {
				t.holdLocked(pid, b)
				t.mu.Unlock()
				return true, false
			}
		}
		p := &pendingBinary{done: make(chan struct{}), pid: pid}
		t.pending[key] = p
		t.mu.Unlock()

		var again bool
		if b != nil {
			held, again = t.addProbes(pid, m, key, b, p, missing)
		} else {
			held, negative = t.newBinary(pid, m, key, p, matched)
		}
		if !again {
			return held, negative
		}
	}
}

// finishLocked ends the evaluation p of key: waiters go on.
func (t *tracker) finishLocked(key process.FileKey, p *pendingBinary) {
	delete(t.pending, key)
	close(p.done)
}

// newBinary evaluates a binary not attached yet for pid and commits the
// result: a binary with uprobes that pid holds, or a negative verdict.
func (t *tracker) newBinary(pid int, m *process.Mapping, key process.FileKey, p *pendingBinary, matched []*compiledProbe) (held, negative bool) {
	file, statErr := process.StatMapping(pid, m)
	if statErr == nil && t.negative != nil && t.negative.Contains(file) {
		t.stats.negativeHits.Add(1)
		t.mu.Lock()
		t.finishLocked(key, p)
		t.mu.Unlock()
		return false, true
	}
	t.mu.Lock()
	// Other evaluations under way may add binaries too: count them.
	full := len(t.binaries)+len(t.pending)-1 >= maxBinaries
	if full {
		t.finishLocked(key, p)
	}
	t.mu.Unlock()
	if full {
		t.logger.Warn("not attaching: too many binaries attached", zap.String("path", m.Path), zap.Int("limit", maxBinaries))
		return false, false
	}
	a, conclusive := t.evaluate(pid, m, matched)
	// Only a binary actually read and found wanting is cached: one whose
	// process exited before it could be opened may be fine.
	if a == nil && conclusive && statErr == nil && t.negative != nil {
		t.negative.Add(file)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	t.finishLocked(key, p)
	if a == nil {
		return false, conclusive
	}
	if t.closed || p.released {
		// Nobody would hold it: the process exited or exec'd while its
		// binary was being attached.
		t.closeAttachment(m.Path, a)
		return false, false
	}
	b := &attachedBinary{key: key, path: m.Path, evaluated: map[uint32]bool{}, holders: map[int]struct{}{}}
	for _, pr := range matched {
		b.evaluated[pr.id] = true
	}
	b.attachments = append(b.attachments, a)
	t.binaries[key] = b
	t.stats.attached.Add(1)
	t.holdLocked(pid, b)
	return true, false
}

// addProbes evaluates probes not yet looked for in the attached binary b,
// and commits the result. again reports that b was detached meanwhile (its
// last process exited): the caller starts over.
func (t *tracker) addProbes(pid int, m *process.Mapping, key process.FileKey, b *attachedBinary, p *pendingBinary, missing []*compiledProbe) (held, again bool) {
	a, _ := t.evaluate(pid, m, missing)

	t.mu.Lock()
	defer t.mu.Unlock()
	t.finishLocked(key, p)
	if t.closed || t.binaries[key] != b {
		if a != nil {
			t.closeAttachment(m.Path, a)
		}
		return false, !t.closed && !p.released
	}
	for _, pr := range missing {
		b.evaluated[pr.id] = true
	}
	if a != nil {
		b.attachments = append(b.attachments, a)
	}
	if p.released {
		return false, false
	}
	t.holdLocked(pid, b)
	return true, false
}

func (t *tracker) closeAttachment(path string, a attachment) {
	if err := a.Close(); err != nil {
		t.logger.Warn("detaching uprobes", zap.String("path", path), zap.Error(err))
	}
}

func (t *tracker) holdLocked(pid int, b *attachedBinary) {
	b.holders[pid] = struct{}{}
	h := t.held[pid]
	if h == nil {
		h = map[process.FileKey]struct{}{}
		t.held[pid] = h
	}
	h[b.key] = struct{}{}
}

// evaluate opens the binary through the process (so container paths
// resolve), plans the probes and attaches their sites. It touches no
// tracker state but its stats, so it runs without the lock. It returns the
// attachment, nil when nothing was attached, and whether that verdict comes
// from reading the binary (not from a failure to open it or to attach).
func (t *tracker) evaluate(pid int, m *process.Mapping, probes []*compiledProbe) (_ attachment, conclusive bool) {
	f, err := process.OpenMapping(pid, m)
	if err != nil {
		t.logger.Debug("opening binary", zap.String("path", m.Path), zap.Int("pid", pid), zap.Error(err))
		return nil, false
	}
	t.stats.evaluations.Add(1)
	bin, err := probesite.Open(f)
	if err != nil {
		t.logger.Info("binary has nothing to instrument: not ELF", zap.String("path", m.Path), zap.Error(err))
		return nil, true
	}
	defer bin.Close()
	var sites []scopeprobe.Site
	var attachedIDs []string
	for _, p := range probes {
		plan, err := bin.PlanProbe(p.id, p.cfg.Entry, p.cfg.exit())
		if err != nil {
			// Once per binary: the binary is now either attached (and
			// never planned again for this probe) or negatively cached.
			level := t.logger.Warn
			if errors.Is(err, probesite.ErrNoSymbol) {
				level = t.logger.Info
			}
			level("probe has nothing to attach to in binary",
				zap.String("probe", p.cfg.ID), zap.String("path", m.Path), zap.Error(err))
			continue
		}
		sites = append(sites, plan.Sites...)
		attachedIDs = append(attachedIDs, p.cfg.ID)
		// Once per binary and probe: a binary is planned once per probe.
		t.logger.Info("probe placement", zap.String("probe", p.cfg.ID), zap.String("path", m.Path), zap.Strings("choices", plan.Notes))
	}
	if len(sites) == 0 {
		return nil, true
	}
	a, err := t.attacher.Attach(process.MappedFilePath(pid, m), sites)
	if err != nil {
		t.logger.Warn("attaching uprobes", zap.String("path", m.Path), zap.Strings("probes", attachedIDs), zap.Error(err))
		return nil, false
	}
	t.logger.Info("attached uprobes", zap.String("path", m.Path), zap.Strings("probes", attachedIDs),
		zap.Int("uprobes", a.Links()), zap.Bool("go", bin.IsGo()), zap.Int("pid", pid))
	return a, true
}

// close stops rescans and detaches every binary.
func (t *tracker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for timer := range t.timers {
		timer.Stop()
	}
	t.timers = nil
	for _, b := range t.binaries {
		t.detachLocked(b)
	}
	t.held = map[int]map[process.FileKey]struct{}{}
}

// attachedCount returns how many binaries are attached and how many
// processes hold the one with key, for tests.
func (t *tracker) attachedCount(key process.FileKey) (binaries, holders int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.binaries[key]; b != nil {
		holders = len(b.holders)
	}
	return len(t.binaries), holders
}

// attachedTotals returns how many binaries have uprobes, and how many
// uprobes there are in all.
func (t *tracker) attachedTotals() (binaries, uprobes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.binaries {
		if len(b.attachments) == 0 {
			continue
		}
		binaries++
		for _, a := range b.attachments {
			uprobes += a.Links()
		}
	}
	return binaries, uprobes
}
