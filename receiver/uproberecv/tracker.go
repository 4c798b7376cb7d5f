package uproberecv

import (
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/negcache"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize"
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
	// maxTableBytes bounds the symbol tables parsed from the binaries
	// being evaluated: a Go binary's take a few MB.
	maxTableBytes = 4 << 20
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
	// tables holds the symbol tables parsed from the binaries evaluated;
	// a binary's go when it is closed after its evaluation.
	tables *symbolize.Tables
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
		tables:      symbolize.NewTables(maxTableBytes),
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
