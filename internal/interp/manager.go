package interp

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

// Config configures a Manager.
type Config struct {
	// Clients are the interpreters followed, tried in order.
	Clients []Client
	// MaxProcesses bounds the processes attached, and those waiting to
	// be looked at; zero means 1024.
	MaxProcesses int
	// CacheBytes bounds the objects kept to name frames; zero means
	// 4 MiB.
	CacheBytes int64
	// Linger is how long an exited process's objects stay to name the
	// samples it left; zero means 10 s.
	Linger time.Duration
	// Logger logs each interpreter version refused, once per process.
	Logger *zap.Logger
}

// ClientStats are the counts of one client.
type ClientStats struct {
	// Attached counts processes attached; Unsupported those that run
	// a version bpfcol has no layout of; Failed those whose attach
	// failed otherwise. A process counts once per exec.
	Attached, Unsupported, Failed int64
	// Processes is how many are attached now.
	Processes int64
	// Named counts frames named; Unnamed those whose object could not be
	// read (the process gone, the object freed or corrupt); Reused
	// those whose cached object had been replaced by another at its
	// address, and was read again.
	Named, Unnamed, Reused int64
}

// Stats are the Manager's counts.
type Stats struct {
	Clients map[string]ClientStats
	// ReadFailures counts reads of processes' memory that failed.
	ReadFailures int64
	// DroppedEvents counts processes not looked at: more were waiting
	// than MaxProcesses.
	DroppedEvents int64
	// Objects is the cache of named objects.
	Objects lru.Stats
}

// Manager attaches the clients to processes, and names their frames. Its
// methods are safe from any goroutine; Run does the attaching.
type Manager struct {
	cfg    Config
	byType map[frame.Type]int // client index by frame type

	// pending are the processes to look at, and their mappings (nil:
	// gone); wake tells Run.
	pendMu  sync.Mutex
	pending map[uint32][]process.Mapping
	wake    chan struct{}

	mu sync.RWMutex
	// procs are the attached processes; gone those that exited, kept
	// for Linger to name their last samples.
	procs map[uint32]*attached
	gone  map[uint32]*attached
	// refused are the processes whose attach failed, counted once.
	refused map[uint32]bool
	serial  uint64

	objects  *lru.Cache[objectKey, *cached]
	interval atomic.Uint64

	counts        []clientCounts // by client, in order
	readFailures  atomic.Int64
	droppedEvents atomic.Int64

	// notReady are the processes to attach again (retry.go), Run's own.
	notReady map[uint32]notReady
}

type clientCounts struct {
	attached, unsupported, failed, processes atomic.Int64
	named, unnamed, reused                   atomic.Int64
}

// attached is a process attached to a client.
type attached struct {
	client int
	inst   Instance
	loops  []Range
	serial uint64
	goneAt time.Time
}

// objectKey is an object of one attach of a process.
type objectKey struct {
	serial uint64
	addr   uint64
}

// cached is a named object, and the interval its identity was last
// checked in.
type cached struct {
	obj     *Object
	checked atomic.Uint64
}

func cachedCost(_ objectKey, c *cached) int64 {
	return int64(unsafe.Sizeof(objectKey{})+unsafe.Sizeof(cached{})+unsafe.Sizeof(Object{})) + 64 + c.obj.Bytes
}

// NewManager returns a Manager of cfg.Clients.
func NewManager(cfg Config) *Manager {
	if cfg.MaxProcesses <= 0 {
		cfg.MaxProcesses = 1024
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 4 << 20
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m := &Manager{
		cfg:     cfg,
		byType:  map[frame.Type]int{},
		pending: map[uint32][]process.Mapping{},
		wake:    make(chan struct{}, 1),
		procs:   map[uint32]*attached{},
		gone:    map[uint32]*attached{},
		refused: map[uint32]bool{},
		objects: lru.New(cfg.CacheBytes, cachedCost),
		counts:  make([]clientCounts, len(cfg.Clients)),
	}
	m.objects.SetMaxIdle(lru.ChurnIdle)
	for i, c := range cfg.Clients {
		m.byType[c.Type()] = i
	}
	return m
}

// Add adds a client, before Run.
func (m *Manager) Add(c Client) {
	m.byType[c.Type()] = len(m.cfg.Clients)
	m.cfg.Clients = append(m.cfg.Clients, c)
	m.counts = append(m.counts, clientCounts{})
}

// ReadFailures is the counter the clients' Memory readers add to.
func (m *Manager) ReadFailures() *atomic.Int64 { return &m.readFailures }

// Mapped tells the Manager of process pid's executable mappings, read
// now. It never blocks: Run looks at the process.
func (m *Manager) Mapped(pid uint32, maps []process.Mapping) {
	m.pendMu.Lock()
	if _, ok := m.pending[pid]; !ok && len(m.pending) >= m.cfg.MaxProcesses {
		m.pendMu.Unlock()
		m.droppedEvents.Add(1)
		return
	}
	if maps == nil {
		maps = []process.Mapping{}
	}
	m.pending[pid] = maps
	m.pendMu.Unlock()
	m.signal()
}

// Forgot tells the Manager that process pid is gone. It never blocks and
// is never dropped: a pid reused by another process must not keep the
// state of this one.
func (m *Manager) Forgot(pid uint32) {
	m.pendMu.Lock()
	m.pending[pid] = nil
	m.pendMu.Unlock()
	m.signal()
}

func (m *Manager) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run attaches and detaches processes as Mapped and Forgot say, until ctx
// is done; then it detaches every process.
func (m *Manager) Run(ctx context.Context) {
	defer m.detachAll()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-retry:
			retry = nil
			m.retryDue()
		}
		m.pendMu.Lock()
		pending := m.pending
		m.pending = map[uint32][]process.Mapping{}
		m.pendMu.Unlock()
		for pid, maps := range pending {
			if ctx.Err() != nil {
				return
			}
			m.update(pid, maps)
		}
		// Exits come here too: their processes go after Linger even
		// when no batch is named.
		m.dropGone(time.Now())
		if retry == nil {
			retry = m.retryTimer()
		}
	}
}

// update attaches pid from its mappings, or detaches it (maps nil: gone).
func (m *Manager) update(pid uint32, maps []process.Mapping) {
	m.mu.RLock()
	cur := m.procs[pid]
	m.mu.RUnlock()
	if maps != nil && cur != nil && cur.inst.Current(maps) {
		return
	}
	if cur != nil {
		m.detach(pid, cur, maps == nil)
	}
	if maps == nil {
		delete(m.notReady, pid)
		m.mu.Lock()
		delete(m.refused, pid)
		m.mu.Unlock()
		return
	}
	for i, c := range m.cfg.Clients {
		inst, err := c.Attach(int(pid), maps)
		if err != nil {
			if isNotReady(err) {
				var later bool
				if later, err = m.retryLater(pid, maps, err); later {
					return
				}
			}
			delete(m.notReady, pid)
			m.refuse(pid, i, err)
			return
		}
		if inst == nil {
			continue
		}
		delete(m.notReady, pid)
		m.mu.Lock()
		m.serial++
		m.procs[pid] = &attached{client: i, inst: inst, loops: inst.Loops(), serial: m.serial}
		delete(m.gone, pid)
		delete(m.refused, pid)
		m.mu.Unlock()
		m.counts[i].attached.Add(1)
		m.counts[i].processes.Add(1)
		return
	}
}

// refuse counts, and logs once, a process a client could not attach.
func (m *Manager) refuse(pid uint32, client int, err error) {
	m.mu.Lock()
	seen := m.refused[pid]
	if !seen {
		if len(m.refused) >= m.cfg.MaxProcesses {
			clear(m.refused)
		}
		m.refused[pid] = true
	}
	m.mu.Unlock()
	if seen {
		return
	}
	c := &m.counts[client]
	if errors.Is(err, ErrUnsupported) {
		c.unsupported.Add(1)
	} else {
		c.failed.Add(1)
	}
	m.cfg.Logger.Info("interpreter frames not walked: native frames only",
		zap.String("interpreter", m.cfg.Clients[client].Name()), zap.Uint32("pid", pid), zap.Error(err))
}

// detach removes a process's BPF state; an exited one stays to name its
// last samples.
func (m *Manager) detach(pid uint32, a *attached, exited bool) {
	_ = a.inst.Detach()
	m.counts[a.client].processes.Add(-1)
	m.mu.Lock()
	delete(m.procs, pid)
	if exited {
		a.goneAt = time.Now()
		m.gone[pid] = a
	}
	m.mu.Unlock()
	if !exited {
		m.dropObjects(a.serial)
	}
}

// detachAll detaches every process as if it exited: the samples already
// taken are still named.
func (m *Manager) detachAll() {
	m.mu.RLock()
	procs := maps.Clone(m.procs)
	m.mu.RUnlock()
	for pid, a := range procs {
		m.detach(pid, a, true)
	}
}

func (m *Manager) dropObjects(serial uint64) {
	m.objects.RemoveFunc(func(k objectKey, _ *cached) bool { return k.serial == serial })
}

// Attached reports whether process pid is attached to a client now: its
// samples from here on carry its interpreted frames.
func (m *Manager) Attached(pid uint32) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.procs[pid] != nil
}

// Loops returns the interpreter-loop ranges of process pid, nil when it
// is attached to no client.
func (m *Manager) Loops(pid uint32) []Range {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if a := m.procs[pid]; a != nil {
		return a.loops
	}
	if a := m.gone[pid]; a != nil {
		return a.loops
	}
	return nil
}

// BeginBatch starts a batch of naming: the objects of processes gone
// for longer than Linger are dropped.
func (m *Manager) BeginBatch() {
	m.dropGone(time.Now())
	m.objects.RemoveIdle()
}

// dropGone forgets the processes gone for longer than Linger, and their
// objects.
func (m *Manager) dropGone(now time.Time) {
	var drop []uint64
	m.mu.Lock()
	for pid, a := range m.gone {
		if now.Sub(a.goneAt) > m.cfg.Linger {
			delete(m.gone, pid)
			drop = append(drop, a.serial)
		}
	}
	m.mu.Unlock()
	for _, s := range drop {
		m.dropObjects(s)
	}
}

// unknownName names an interpreted frame whose object could not be read.
const unknownName = "[unknown]"

// process returns the attach of pid that f's client made, nil if none.
func (m *Manager) process(pid uint32, f *frame.Frame) (*attached, *clientCounts) {
	ci, ok := m.byType[f.Type]
	if !ok {
		return nil, nil
	}
	m.mu.RLock()
	a := m.procs[pid]
	if a == nil {
		a = m.gone[pid]
	}
	m.mu.RUnlock()
	if a == nil || a.client != ci {
		return nil, &m.counts[ci]
	}
	return a, &m.counts[ci]
}

// NewInterval starts an interval of aggregation: Read checks each object
// against reuse of its address once per interval.
func (m *Manager) NewInterval() { m.interval.Add(1) }

// Place says how f, a frame of process pid found at native (the native
// frame at its anchor), goes with it: as f's runtime says when it is a
// JIT, else (HotSpot) f replaces native as the walk found it, f.Native
// unset. PlaceDrop when the process is not attached to f's runtime.
func (m *Manager) Place(pid uint32, native, f *frame.Frame) Placement {
	a, _ := m.process(pid, f)
	if a == nil {
		return PlaceDrop
	}
	j, ok := a.inst.(JIT)
	if !ok {
		f.Native, f.ReturnAddress = 0, false
		return PlaceReplace
	}
	return j.Place(native, f)
}

// locate turns f, a JIT runtime's frame still at its native address, into
// the object that names it and its offset there. It reports whether f
// names an object.
func locate(a *attached, f *frame.Frame) bool {
	if f.Native == 0 {
		return true
	}
	j, ok := a.inst.(JIT)
	if !ok {
		return false
	}
	addr, off, err := j.Locate(f)
	if err != nil {
		return false
	}
	f.Address, f.Offset, f.Native = addr, off, 0
	return true
}

// Read reads, while process pid still runs, the object that names f, an
// interpreted frame of a stack first seen in this interval: the
// aggregator calls it, so that frames are named even when their process
// exits before the report. An object read before is checked against
// reuse of its address, once per interval: stacks are keyed by address,
// so samples of an object freed and replaced at its address within one
// interval are named as the first. It never fails: what cannot be read
// now is tried again by Name.
func (m *Manager) Read(pid uint32, f *frame.Frame) {
	if f.Truncated {
		return
	}
	a, c := m.process(pid, f)
	if a == nil || !locate(a, f) {
		return
	}
	key := objectKey{serial: a.serial, addr: f.Address}
	interval := m.interval.Load()
	if e, ok := m.objects.Get(key); ok {
		if e.checked.Load() == interval {
			return
		}
		id, err := a.inst.Identity(f.Address)
		switch {
		case err != nil:
			return // gone: what was read stays, right at its last check
		case bytes.Equal(id, e.obj.Identity):
			e.checked.Store(interval)
			return
		}
		m.objects.Remove(key)
		c.reused.Add(1)
	}
	m.read(a, key, interval)
}

// read reads and caches the object at key.
func (m *Manager) read(a *attached, key objectKey, interval uint64) *Object {
	obj, err := a.inst.Object(key.addr)
	if err != nil {
		return nil
	}
	e := &cached{obj: obj}
	e.checked.Store(interval)
	m.objects.Add(key, e)
	return obj
}

// Name returns the lines of f, an interpreted frame of process pid: from
// the object Read cached, else read now.
func (m *Manager) Name(pid uint32, f *frame.Frame) []frame.Line {
	if f.Truncated {
		return []frame.Line{{Name: Truncated}}
	}
	a, c := m.process(pid, f)
	if a == nil || !locate(a, f) {
		if c != nil {
			c.unnamed.Add(1)
		}
		return []frame.Line{{Name: unknownName}}
	}
	key := objectKey{serial: a.serial, addr: f.Address}
	e, ok := m.objects.Peek(key)
	var obj *Object
	if ok {
		obj = e.obj
	} else if obj = m.read(a, key, m.interval.Load()); obj == nil {
		c.unnamed.Add(1)
		return []frame.Line{{Name: unknownName}}
	}
	c.named.Add(1)
	return lines(obj, f.Offset)
}

func lines(o *Object, offset uint32) []frame.Line {
	if o.Inlines != nil {
		return o.Inlines.Lines(offset)
	}
	var line int64
	if o.Lines != nil && offset != frame.NoOffset {
		line = o.Lines.Line(offset)
	}
	return []frame.Line{{Name: o.Name, File: o.File, Line: line}}
}

// Stats returns the Manager's counts.
func (m *Manager) Stats() Stats {
	s := Stats{
		Clients:       map[string]ClientStats{},
		ReadFailures:  m.readFailures.Load(),
		DroppedEvents: m.droppedEvents.Load(),
		Objects:       m.objects.Stats(),
	}
	for i, c := range m.cfg.Clients {
		n := &m.counts[i]
		s.Clients[c.Name()] = ClientStats{
			Attached: n.attached.Load(), Unsupported: n.unsupported.Load(), Failed: n.failed.Load(),
			Processes: n.processes.Load(),
			Named:     n.named.Load(), Unnamed: n.unnamed.Load(), Reused: n.reused.Load(),
		}
	}
	return s
}
