package uproberecv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/dirwatch"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/safefs"
)

const (
	// negativeTTL bounds how long a binary replaced with the same size and
	// mtime keeps its stale "nothing to instrument" verdict.
	negativeTTL = 10 * time.Minute
	// maxNegative bounds the negative cache.
	maxNegative = 4096
	// maxBinaries bounds the attached binaries (held, retained and named by
	// binary:); beyond it new ones are refused (and logged) rather than
	// growing kernel state without end.
	maxBinaries = 1024
)

// rescanDelays are when a dynamically linked process is scanned again
// after exec, when no mapping events tell of its libraries: the exec
// tracepoint fires before ld.so maps them.
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
	return p.matchesPath(path)
}

func (p *compiledProbe) matchesPath(path string) bool {
	if p.match != nil {
		return p.match.MatchString(path)
	}
	return path == p.cfg.Binary
}

// attachedBinary is one binary with uprobes on it. Uprobes live on the
// inode, so every process mapping it later is covered from its first
// instruction: a binary stays attached while processes hold it, while a
// binary: probe names it (pinned), and for a bounded time after its last
// process exited (retained), until it changes or is evicted.
type attachedBinary struct {
	key process.FileKey
	// file is the identity evaluated; a mapping of the same key with
	// another size or mtime is a changed file.
	file        process.FileID
	path        string
	attachments []attachment
	evaluated   map[uint32]bool // probes looked for, found or not
	holders     map[int]struct{}
	pinned      bool
	// idleSince is when the last holder left; zero while held or pinned.
	idleSince time.Time
	// attachedAt is when its uprobes were attached, in ktime: an exec or
	// mapping that waited for that attach under way measures its latency
	// from it.
	attachedAt int64
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
	// callAt is when the evaluation began attaching (ktime; zero when it
	// did not): what came before is the event's notice and the lookup.
	callAt int64
}

// trackerStats are discovery's counts since start.
type trackerStats struct {
	// scans counts /proc/PID/maps reads.
	scans atomic.Int64
	// evaluations counts binaries opened and parsed for symbols: once per
	// file identity and set of probes, not per exec.
	evaluations atomic.Int64
	// negativeHits counts binaries skipped thanks to the negative cache.
	negativeHits atomic.Int64
	// quietExecs counts execs answered from the exec event alone: a static
	// executable known to have nothing to instrument. Each is also a
	// negative hit.
	quietExecs atomic.Int64
	// knownFailures counts probes not planned or attached again because
	// the binary or the kernel refused them before (see planCache).
	knownFailures atomic.Int64
	// attached and detached count binaries; evicted counts the retained
	// ones detached for retain's bounds.
	attached, detached, evicted atomic.Int64
	// exitedBeforeAttach counts processes that exited before the binary
	// they ran or mapped was attached: their calls until then are lost.
	exitedBeforeAttach atomic.Int64
	// lookupCPUNanos is the CPU time spent finding probed functions in
	// binaries (symbol lookup and placement).
	lookupCPUNanos atomic.Int64
	// attachedOnWrite counts files attached when they were written into a
	// watched directory, before anything ran them.
	attachedOnWrite atomic.Int64
	// mappingsUnnamed counts mapping events without a path whose process
	// was gone, or had unmapped the file, before its maps were read: a
	// matching library among them stays unattached (until another process
	// maps it).
	mappingsUnnamed atomic.Int64
	// execPathsUnresolved counts exec events with a relative path (execve
	// given ./prog) that no working directory turned into the executed
	// file's absolute path: such a process is found only by reading its
	// /proc entries, so one gone before is neither attached nor described.
	execPathsUnresolved atomic.Int64
}

// trackerOptions are a tracker's knobs.
type trackerOptions struct {
	retain RetainConfig
	// mappingEvents: MapExec events tell of libraries, so execs need no
	// rescans.
	mappingEvents bool
	// infoLinger is how long the Info of an exited process is kept: two
	// batches and the poll that reads its last records, and longer than
	// the records of a process wait for its description.
	infoLinger time.Duration
	// now is the clock of retention and retries; time.Now when nil.
	now func() time.Time
}

// tracker discovers processes mapping matching binaries and keeps the
// binaries attached (see attachedBinary).
type tracker struct {
	logger   *zap.Logger
	probes   []compiledProbe
	attacher attacher
	opts     trackerOptions
	negative *negcache.Files // nil: every binary is evaluated afresh
	// quiet holds statically linked executables the negative cache
	// answered: such a process maps no other file at exec, so the exec
	// event's file identity settles it without reading /proc. Keyed by that
	// identity; nil with negative.
	quiet *negcache.Files
	// onePath: every probe names the same exact path (binary:).
	onePath bool
	infos   *process.InfoCache
	plans   *planCache
	// unmatched holds files no probe's path matches, so mapping events
	// without a path do not read /proc/PID/maps for them again. nil when a
	// probe's pids make matching depend on the process.
	unmatched *negcache.Files
	stats     trackerStats
	latency   *latencies
	// attachCalls keeps how long the attach calls themselves took (the
	// kernel's registration, a grace period's wait included), apart from
	// the wait for the event and the evaluation, for the benchmark.
	attachCalls *latencies
	// detacher closes detached binaries' uprobes off the lock and the
	// event loop.
	detacher *detacher

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
	// exited are processes whose Info is kept for records read after
	// their exit, oldest first.
	exited []exitedProcess
}

// exitedProcess is a process that exited at, whose Info is dropped a
// report interval later.
type exitedProcess struct {
	pid int
	at  time.Time
}

func newTracker(logger *zap.Logger, cfgs []ProbeConfig, a attacher, negative *negcache.Files, infos *process.InfoCache, opts trackerOptions) (*tracker, error) {
	if opts.now == nil {
		opts.now = time.Now
	}
	t := &tracker{
		logger:      logger,
		attacher:    a,
		opts:        opts,
		negative:    negative,
		infos:       infos,
		plans:       newPlanCache(maxPlans, opts.now),
		latency:     newLatencies(),
		attachCalls: newLatencies(),
		detacher:    newDetacher(logger),
		binaries:    map[process.FileKey]*attachedBinary{},
		pending:     map[process.FileKey]*pendingBinary{},
		held:        map[int]map[process.FileKey]struct{}{},
		execGen:     map[int]uint64{},
		timers:      map[*time.Timer]struct{}{},
	}
	if negative != nil {
		t.quiet = negcache.NewFiles(negativeTTL, maxNegative)
	}
	t.unmatched = negcache.NewFiles(negativeTTL, maxNegative)
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
			t.unmatched = nil
			p.pids = map[int]bool{}
			for _, pid := range c.PIDs {
				p.pids[pid] = true
			}
		}
		t.probes = append(t.probes, p)
	}
	return t, nil
}

// pinBinaries attaches every binary a binary: probe names, by path,
// whether or not a process runs it: uprobes live on the inode, so each
// later exec is covered from its first instruction. A path that does not
// exist yet is logged once and attached when written there (see
// watchedDirs) or when a process maps it.
func (t *tracker) pinBinaries() {
	done := map[string]bool{}
	for i := range t.probes {
		path := t.probes[i].cfg.Binary
		if path == "" || done[path] {
			continue
		}
		done[path] = true
		// Without blocking: a FIFO at the path must not stall the start.
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			// A path that does not exist was warned about at start,
			// with its probe (Config.logMissingBinaries).
			level := t.logger.Warn
			if errors.Is(err, fs.ErrNotExist) {
				level = t.logger.Debug
			}
			level("binary to probe is not there: it is attached when written there or when a process maps it", zap.String("path", path), zap.Error(err))
			continue
		}
		fi, err := f.Stat()
		var file process.FileID
		if err == nil {
			file, err = process.StatFile(f)
		}
		f.Close()
		if err != nil {
			t.logger.Warn("binary to probe cannot be stated: it is attached when a process maps it", zap.String("path", path), zap.Error(err))
			continue
		}
		if !fi.Mode().IsRegular() {
			// Warned about at start, with its probe: a directory or a
			// device has nothing to read.
			continue
		}
		var matched []*compiledProbe
		for j := range t.probes {
			// The pid filter is the BPF side's: the uprobes are on the
			// inode for every process.
			if t.probes[j].matchesPath(path) {
				matched = append(matched, &t.probes[j])
			}
		}
		tg := &target{path: path, attachPath: path, file: file, open: func() (*os.File, error) { return openSame(path, file) }}
		t.binary(0, tg, matched, 0, "")
	}
}

// libraryDirs are where the dynamic loader finds libraries by default:
// their files that a file_match probe matches are attached at start, so a
// library loaded later (dlopen, Python extension modules) is covered from
// its first instruction without waiting for its mapping to be seen.
var libraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"}

const (
	// maxDirEntries bounds the entries read from one directory at start.
	maxDirEntries = 20000
	// maxWatchedDirs bounds the directories watched for files written
	// into them.
	maxWatchedDirs = 64
	// maxWatchPending bounds the written files waiting to be attached;
	// more are counted and left to the exec path.
	maxWatchPending = 1024
)

// retaining reports whether binaries without processes are kept attached:
// only then is attaching a file before anything runs it of use.
func (t *tracker) retaining() bool {
	return t.opts.retain.MaxBinaries > 0 && t.opts.retain.MaxAge > 0
}

// preattachable returns the probes that attach a file by its path alone:
// binary: ones naming it (their pids are the BPF side's filter, as in
// pinBinaries), and file_match ones without pids (a pid list matches per
// process).
func (t *tracker) preattachable(path string) []*compiledProbe {
	var matched []*compiledProbe
	for j := range t.probes {
		p := &t.probes[j]
		if p.cfg.Binary == path || (p.match != nil && p.pids == nil && t.retaining() && p.match.MatchString(path)) {
			matched = append(matched, p)
		}
	}
	return matched
}

// fileMatchDirs returns the directories anchored file_match regexes name
// literally (see literalDir), where files are attached at start and when
// written, before anything runs them; others keep the exec path.
func (t *tracker) fileMatchDirs() []string {
	if !t.retaining() {
		return nil
	}
	var dirs []string
	for i := range t.probes {
		p := &t.probes[i]
		if p.match == nil || p.pids != nil {
			continue
		}
		if d, ok := literalDir(p.cfg.FileMatch); ok && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// watchedDirs returns the directories watched for files written into
// them: those of fileMatchDirs, and those holding a binary: probe's file,
// so that a new version installed there is attached before it runs.
func (t *tracker) watchedDirs() []string {
	dirs := t.fileMatchDirs()
	for i := range t.probes {
		if path := t.probes[i].cfg.Binary; filepath.IsAbs(path) {
			if d := filepath.Dir(path); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// preattachCandidates attaches, at start, the files on disk a file_match
// probe matches: those in the loader's default directories, and those in
// the directories of watchedDirs. Each listing is bounded (maxDirEntries,
// not recursive), and the whole by retain.max_binaries files; like
// retained binaries they are kept until they change or retention evicts
// them.
func (t *tracker) preattachCandidates() {
	if !t.retaining() {
		return
	}
	wanted := false
	for i := range t.probes {
		if p := &t.probes[i]; p.match != nil && p.pids == nil {
			wanted = true
		}
	}
	if !wanted {
		return
	}
	ordered := t.fileMatchDirs()
	for _, d := range libraryDirs {
		if !slices.Contains(ordered, d) {
			ordered = append(ordered, d)
		}
	}
	attached := 0
	seen := map[process.FileKey]bool{}
	for _, dir := range ordered {
		d, err := safefs.OpenNoLinks(dir)
		if err != nil {
			continue
		}
		names, truncated, _ := d.ReadNames(maxDirEntries)
		if truncated {
			t.logger.Info("directory has more entries than are read at start: the others are attached when they run",
				zap.String("dir", dir), zap.Int("read", maxDirEntries))
		}
		for _, name := range names {
			if attached >= t.opts.retain.MaxBinaries {
				t.logger.Info("not attaching more files at start: retain.max_binaries reached", zap.String("dir", dir), zap.Int("limit", t.opts.retain.MaxBinaries))
				d.Close()
				return
			}
			key, _, retained := t.attachFileOf(d, name, true, seen)
			if retained {
				seen[key] = true
				attached++
			}
		}
		d.Close()
	}
}

// attachFileOf attaches the file name in the directory d if a probe
// matches its path and it is a complete regular file (written: its writer
// closed it, or it was moved or linked in). A binary: probe's file is
// pinned, as at start; a file_match one is retained from then on, as a
// binary whose last process exited. Symlinks are never followed: a process
// maps, and /proc/PID/maps shows, the file a link leads to, under its own
// name. fresh reports uprobes attached by this call, retained a binary
// idle from now.
func (t *tracker) attachFileOf(d *safefs.Dir, name string, written bool, skip map[process.FileKey]bool) (key process.FileKey, fresh, retained bool) {
	path := filepath.Join(d.Name(), name)
	matched := t.preattachable(path)
	if len(matched) == 0 {
		return key, false, false
	}
	f, err := d.Open(name)
	if err != nil {
		// A symlink, a FIFO, a directory, or gone.
		return key, false, false
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return key, false, false
	}
	file, known := process.FileIDOf(fi)
	if !known || skip[file.FileKey] {
		return key, false, false
	}
	if !written && process.Links(fi) < 2 {
		// Created and maybe still being written: its close tells.
		return key, false, false
	}
	tg := &target{path: path, attachPath: path, file: file, open: func() (*os.File, error) { return d.Open(name) }}
	before := ktime.MonotonicNanos()
	t.binary(0, tg, matched, 0, "")
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.binaries[file.FileKey]
	if b == nil || !b.file.Same(file) {
		return file.FileKey, false, false
	}
	fresh = b.attachedAt >= before
	for _, o := range t.binaries {
		if o != b && o.path == path && len(o.holders) == 0 && !o.pinned {
			// Replaced at its path (a new version moved over it): the
			// old inode runs no more processes from there.
			t.detachLocked(o, "replaced at its path", false)
		}
	}
	if written && b.path != path && !b.pinned {
		// Moved here from a temporary name (an installer's): named by
		// where it is now, so that its own replacement is seen.
		b.path = path
	}
	if len(b.holders) > 0 || b.pinned || !b.idleSince.IsZero() {
		return file.FileKey, fresh, false
	}
	// Held by nobody: retained from now, within retain's bounds.
	t.idleLocked(b, t.opts.now())
	return file.FileKey, fresh, true
}

// written handles a change in a watched directory: a file written, moved
// or linked in is attached before anything runs it.
func (t *tracker) written(c dirwatch.Change) {
	if _, fresh, _ := t.attachFileOf(c.Dir, c.Name, c.Written, nil); fresh {
		t.stats.attachedOnWrite.Add(1)
	}
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
		t.scan(pid, 0, "")
	}
	return nil
}

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
	if known(exe) && filepath.IsAbs(path) {
		if matched := t.matching(pid, path); len(matched) > 0 {
			t.binary(pid, fileTarget(pid, path, exe), matched, at, triggerExec)
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
	if path == "" || filepath.IsAbs(path) || !known(exe) {
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
	t.binary(pid, fileTarget(pid, path, file), matched, at, triggerMapping)
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
		t.binary(pid, mappingTarget(pid, m, file), matched, at, triggerMapping)
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
		held, negative := t.binary(pid, mappingTarget(pid, m, file), matched, at, trigger)
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
			if err == nil || !known(file) {
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

// known reports whether file's size and mtime are known.
func known(file process.FileID) bool { return file.Ino != 0 && !file.ModTime.IsZero() }

// binary makes sure the matched probes are attached to the binary tg, and
// that pid (0: none, the binary is pinned) holds it. It reports whether pid
// now holds the binary, and whether the binary is known to have nothing for
// the matched probes (from the negative cache or from reading it just now).
//
// The binary is read and attached without the tracker's lock: it is marked
// pending, evaluated, and the result committed under the lock. Whoever
// finds it pending waits for that result.
func (t *tracker) binary(pid int, tg *target, matched []*compiledProbe, at uint64, trigger string) (held, negative bool) {
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
		if b != nil && known(tg.file) && known(b.file) && !b.file.Same(tg.file) {
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
	if known(tg.file) && t.negative != nil && t.negative.Contains(tg.file) {
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
	if len(as) == 0 && conclusive && known(tg.file) && t.negative != nil {
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

// close stops rescans and detaches every binary, returning once their
// uprobes, and those handed to the detacher before, are closed.
func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	for timer := range t.timers {
		timer.Stop()
	}
	t.timers = nil
	for _, b := range t.binaries {
		// By the detacher, in parallel (closed is set, so closeAttachments
		// would close them one by one), and waited for below.
		t.detacher.detach(b.path, b.attachments)
		b.attachments = nil
		t.detachLocked(b, "shutdown", false)
	}
	t.held = map[int]map[process.FileKey]struct{}{}
	t.mu.Unlock()
	t.detacher.wait()
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

// isAttached reports whether the binary with key has uprobes, for tests
// and benchmarks.
func (t *tracker) isAttached(key process.FileKey) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.binaries[key] != nil
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
