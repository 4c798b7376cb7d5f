package scopeprobe

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/bpfcol/bpfcol/internal/bpf/counters"
)

// Mirrored from uprobe.bpf.c.
const (
	cookieScopeByG        = 1 << 32
	cookieFixed           = 1 << 63
	settingMainThreadOnly = 1 << 0
	settingPIDFilter      = 1 << 1
	recordMainThread      = 1 << 0
)

// Indexes of the counters map, mirrored from uprobe.bpf.c.
const (
	counterRecords = iota
	counterLostRingbuf
	counterExitNoEntry
	counterShort
	counterScopeFull
	counterFiltered
	counterMax
)

const (
	recordSize         = int(unsafe.Sizeof(uprobeScopeRecord{}))
	defaultMaxScopes   = 16384
	defaultRingBytes   = 1 << 20
	maxRingBufferBytes = 256 << 20
	// maxPIDFilter bounds the pid filter map.
	maxPIDFilter = 4096
)

// ErrClosed is returned by Read once the Probes are closed.
var ErrClosed = os.ErrClosed

// ErrDeadline is returned by Read when the deadline set by SetDeadline
// passed before a record arrived.
var ErrDeadline = os.ErrDeadlineExceeded

// ErrFlushed is returned by Read once the records present at Flush were
// read.
var ErrFlushed = ringbuf.ErrFlushed

// Probes are the loaded scope programs and maps. Attach puts them on
// binaries; Read returns the records.
type Probes struct {
	objs   uprobeObjects
	reader *ringbuf.Reader
	record ringbuf.Record
	raw    uprobeScopeRecord

	// entryMulti and exitMulti are the scope programs loaded for
	// uprobe_multi links; nil when the kernel has none or Options say so.
	entryMulti, exitMulti *ebpf.Program

	// copySpec holds the scope programs of the attach mode in use, loaded
	// once per cookie with the cookie as a constant (fixedPrograms); nil
	// for empty programs, which read no cookie.
	copySpec *ebpf.CollectionSpec
	// sharedMaps are the maps every copy uses.
	sharedMaps map[string]*ebpf.Map

	mu          sync.Mutex
	attachments map[*Attachment]struct{}
	// fixed holds the program copies by cookie: at most two per probe.
	fixed  map[uint64]scopePrograms
	closed bool
}

// New checks support, then loads the programs and fills the settings map.
func New(opts Options) (_ *Probes, err error) {
	if len(opts.Settings) == 0 {
		return nil, errors.New("loading scope probes: no probe settings")
	}
	if err := CheckSupport(); err != nil {
		return nil, err
	}
	spec, err := loadUprobe()
	if err != nil {
		return nil, fmt.Errorf("loading scope probe spec: %w", err)
	}
	maxScopes := opts.MaxScopes
	if maxScopes <= 0 {
		maxScopes = defaultMaxScopes
	}
	spec.Maps[uprobeMapScopes].MaxEntries = uint32(maxScopes)
	spec.Maps[uprobeMapSettings].MaxEntries = uint32(len(opts.Settings))
	spec.Maps[uprobeMapPidFilter].MaxEntries = maxPIDFilter
	spec.Maps[uprobeMapRecords].MaxEntries = ringSize(opts.RingBufferBytes)

	p := &Probes{attachments: map[*Attachment]struct{}{}, fixed: map[uint64]scopePrograms{}}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if err := p.load(spec, opts); err != nil {
		return nil, err
	}
	if err := p.writeSettings(opts.Settings); err != nil {
		return nil, err
	}
	if p.reader, err = ringbuf.NewReader(p.objs.Records); err != nil {
		return nil, fmt.Errorf("opening scope record ringbuf: %w", err)
	}
	return p, nil
}

// load loads the maps and programs into p: the fill program only when
// asked, the scope programs once more for uprobe_multi links when the kernel
// has them, and empty programs in their place for floor benchmarks.
func (p *Probes) load(spec *ebpf.CollectionSpec, opts Options) error {
	if !opts.LoadFiller {
		delete(spec.Programs, uprobeProgFillRecords)
	}
	if opts.EmptyPrograms {
		for _, name := range []string{uprobeProgScopeEntry, uprobeProgScopeExit} {
			spec.Programs[name].Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
		}
	}
	// Kernels before 6.2 refuse task storage in uprobe programs: thread
	// scopes then go to the scopes map with the goroutine ones.
	if features.HaveProgramHelper(ebpf.Kprobe, asm.FnTaskStorageGet) == nil {
		if err := spec.Variables[uprobeVarThreadStorage].Set(true); err != nil {
			return fmt.Errorf("enabling thread scopes in task storage: %w", err)
		}
	}
	if opts.WakeupBytes > 0 {
		if err := spec.Variables[uprobeVarWakeupBytes].Set(uint64(opts.WakeupBytes)); err != nil {
			return fmt.Errorf("setting ringbuf wakeup threshold: %w", err)
		}
	}
	multi := !opts.PerfEventUprobes && features.HaveBPFLinkUprobeMulti() == nil
	if multi {
		for _, name := range []string{uprobeProgScopeEntry, uprobeProgScopeExit} {
			ps := spec.Programs[name].Copy()
			ps.Name += "_m"
			ps.AttachType = ebpf.AttachTraceUprobeMulti
			spec.Programs[name+multiSuffix] = ps
		}
	}
	if !opts.EmptyPrograms {
		p.copySpec = spec.Copy()
		suffix := ""
		if multi {
			suffix = multiSuffix
		}
		p.copySpec.Programs = map[string]*ebpf.ProgramSpec{}
		for _, name := range []string{uprobeProgScopeEntry + suffix, uprobeProgScopeExit + suffix} {
			p.copySpec.Programs[name] = spec.Programs[name].Copy()
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return fmt.Errorf("loading scope probes: %w", explainPermission(err))
	}
	// Close releases whatever was not detached below.
	defer coll.Close()
	o := &p.objs
	for name, dst := range map[string]**ebpf.Map{
		uprobeMapCounters: &o.Counters, uprobeMapPidFilter: &o.PidFilter, uprobeMapRecords: &o.Records,
		uprobeMapScopes: &o.Scopes, uprobeMapSettings: &o.Settings, uprobeMapThreadScopes: &o.ThreadScopes,
	} {
		*dst = coll.DetachMap(name)
	}
	p.sharedMaps = map[string]*ebpf.Map{
		uprobeMapCounters: o.Counters, uprobeMapPidFilter: o.PidFilter, uprobeMapRecords: o.Records,
		uprobeMapScopes: o.Scopes, uprobeMapSettings: o.Settings, uprobeMapThreadScopes: o.ThreadScopes,
	}
	for name, dst := range map[string]**ebpf.Program{
		uprobeProgScopeEntry: &o.ScopeEntry, uprobeProgScopeExit: &o.ScopeExit, uprobeProgFillRecords: &o.FillRecords,
		uprobeProgScopeEntry + multiSuffix: &p.entryMulti, uprobeProgScopeExit + multiSuffix: &p.exitMulti,
	} {
		*dst = coll.DetachProgram(name)
	}
	return nil
}

// multiSuffix names the copies of the scope programs loaded for
// uprobe_multi links, which need their own expected attach type.
const multiSuffix = "_multi"

// scopePrograms are an entry and an exit program.
type scopePrograms struct{ entry, exit *ebpf.Program }

func (sp scopePrograms) close() error {
	return errors.Join(sp.entry.Close(), sp.exit.Close())
}

// programsFor returns the scope programs to attach sites of cookie with:
// a copy with the cookie built in, loaded on first use, or the programs
// that read it when there is no copy to make.
func (p *Probes) programsFor(cookie uint64, multi bool) (scopePrograms, error) {
	generic := scopePrograms{p.objs.ScopeEntry, p.objs.ScopeExit}
	if multi {
		generic = scopePrograms{p.entryMulti, p.exitMulti}
	}
	if p.copySpec == nil {
		return generic, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return scopePrograms{}, ErrClosed
	}
	if sp, ok := p.fixed[cookie]; ok {
		return sp, nil
	}
	spec := p.copySpec.Copy()
	if err := spec.Variables[uprobeVarFixedCookie].Set(cookie | cookieFixed); err != nil {
		return scopePrograms{}, fmt.Errorf("fixing cookie %#x: %w", cookie, err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: p.sharedMaps})
	if err != nil {
		return scopePrograms{}, fmt.Errorf("loading scope programs for cookie %#x: %w", cookie, explainPermission(err))
	}
	defer coll.Close()
	suffix := ""
	if multi {
		suffix = multiSuffix
	}
	sp := scopePrograms{coll.DetachProgram(uprobeProgScopeEntry + suffix), coll.DetachProgram(uprobeProgScopeExit + suffix)}
	p.fixed[cookie] = sp
	return sp, nil
}

func ringSize(bytes int) uint32 {
	if bytes <= 0 {
		bytes = defaultRingBytes
	}
	bytes = max(bytes, os.Getpagesize())
	bytes = min(bytes, maxRingBufferBytes)
	return uint32(1) << bits.Len32(uint32(bytes-1))
}

func (p *Probes) writeSettings(settings []Setting) error {
	pids := 0
	for id, s := range settings {
		if s.MinDuration < 0 {
			return fmt.Errorf("probe %d: negative min duration %s", id, s.MinDuration)
		}
		v := uprobeProbeSetting{MinDurationNs: uint64(s.MinDuration)}
		if s.MainThreadOnly {
			v.Flags |= settingMainThreadOnly
		}
		if len(s.PIDs) > 0 {
			v.Flags |= settingPIDFilter
		}
		if err := p.objs.Settings.Put(uint32(id), &v); err != nil {
			return fmt.Errorf("writing setting of probe %d: %w", id, err)
		}
		for _, pid := range s.PIDs {
			if pids++; pids > maxPIDFilter {
				return fmt.Errorf("more than %d pids in probe filters", maxPIDFilter)
			}
			k := uprobePidFilterKey{ProbeId: uint32(id), Pid: pid}
			if err := p.objs.PidFilter.Put(&k, uint8(1)); err != nil {
				return fmt.Errorf("writing pid filter of probe %d: %w", id, err)
			}
		}
	}
	return nil
}

// Attachment is the set of uprobes put on one binary. Close detaches them.
type Attachment struct {
	probes *Probes
	links  []link.Link
	sites  int
	multi  bool
}

// Attach puts every site on the binary at path. Any path naming the file
// works, /proc/PID/map_files/... included: the kernel attaches to the
// inode, so every process mapping the file is probed. Either all sites are
// attached or none.
//
// With uprobe_multi (kernel 6.6+) all sites of a kind go into one link, one
// syscall for the lot; otherwise each site is its own perf-event uprobe.
func (p *Probes) Attach(path string, sites []Site) (_ *Attachment, err error) {
	exe, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s for uprobes: %w", path, err)
	}
	a := &Attachment{probes: p, sites: len(sites), multi: p.entryMulti != nil}
	defer func() {
		if err != nil {
			a.closeLinks()
		}
	}()
	if a.multi {
		err = p.attachMulti(a, exe, path, sites)
	} else {
		err = p.attachEach(a, exe, path, sites)
	}
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	p.attachments[a] = struct{}{}
	return a, nil
}

func cookieOf(s Site) uint64 {
	cookie := uint64(s.ProbeID)
	if s.ScopeByGoroutine {
		cookie |= cookieScopeByG
	}
	return cookie
}

func (p *Probes) attachEach(a *Attachment, exe *link.Executable, path string, sites []Site) error {
	for _, s := range sites {
		cookie := cookieOf(s)
		progs, err := p.programsFor(cookie, false)
		if err != nil {
			return err
		}
		// Address bypasses cilium's own symbol lookup; Offset 0 keeps the
		// address as the exact file offset.
		opts := &link.UprobeOptions{Address: s.Offset, Cookie: cookie, RefCtrOffset: s.RefCtrOffset}
		var l link.Link
		switch s.Kind {
		case Entry:
			l, err = exe.Uprobe(s.Symbol, progs.entry, opts)
		case Exit:
			l, err = exe.Uprobe(s.Symbol, progs.exit, opts)
		case ReturnProbe:
			l, err = exe.Uretprobe(s.Symbol, progs.exit, opts)
		default:
			err = fmt.Errorf("unknown site kind %d", s.Kind)
		}
		if err != nil {
			return fmt.Errorf("attaching %s %s at file offset %#x of %s: %w", s.Kind, s.Symbol, s.Offset, path, explainPermission(err))
		}
		a.links = append(a.links, l)
	}
	return nil
}

// multiBatch is what one uprobe_multi link per site kind holds for the
// sites of one cookie.
type multiBatch struct {
	byKind     [ReturnProbe + 1]link.UprobeMultiOptions
	names      [ReturnProbe + 1][]string
	semaphores bool
}

func (p *Probes) attachMulti(a *Attachment, exe *link.Executable, path string, sites []Site) error {
	batches := map[uint64]*multiBatch{}
	var cookies []uint64
	for _, s := range sites {
		if s.Kind < Entry || s.Kind > ReturnProbe {
			return fmt.Errorf("attaching %s of %s: unknown site kind %d", s.Symbol, path, s.Kind)
		}
		cookie := cookieOf(s)
		b := batches[cookie]
		if b == nil {
			b = &multiBatch{}
			batches[cookie] = b
			cookies = append(cookies, cookie)
		}
		o := &b.byKind[s.Kind]
		o.Addresses = append(o.Addresses, s.Offset)
		o.Cookies = append(o.Cookies, cookie)
		o.RefCtrOffsets = append(o.RefCtrOffsets, s.RefCtrOffset)
		b.semaphores = b.semaphores || s.RefCtrOffset != 0
		b.names[s.Kind] = append(b.names[s.Kind], s.Symbol)
	}
	for _, cookie := range cookies {
		progs, err := p.programsFor(cookie, true)
		if err != nil {
			return err
		}
		b := batches[cookie]
		for kind := range b.byKind {
			o := &b.byKind[kind]
			if len(o.Addresses) == 0 {
				continue
			}
			if !b.semaphores {
				o.RefCtrOffsets = nil
			}
			var l link.Link
			switch SiteKind(kind) {
			case Entry:
				l, err = exe.UprobeMulti(nil, progs.entry, o)
			case Exit:
				l, err = exe.UprobeMulti(nil, progs.exit, o)
			case ReturnProbe:
				l, err = exe.UretprobeMulti(nil, progs.exit, o)
			}
			if err != nil {
				return fmt.Errorf("attaching %d %s uprobes (%s) to %s with uprobe_multi: %w",
					len(o.Addresses), SiteKind(kind), summarize(b.names[kind]), path, explainPermission(err))
			}
			a.links = append(a.links, l)
		}
	}
	return nil
}

// summarize names the first few sites of a failed batch.
func summarize(names []string) string {
	const shown = 3
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}

// Links is how many uprobes the attachment holds (sites, not links: a
// uprobe_multi link holds many).
func (a *Attachment) Links() int { return a.sites }

// Multi reports whether the sites went into uprobe_multi links.
func (a *Attachment) Multi() bool { return a.multi }

// Close detaches every uprobe of the attachment. It is safe to call more
// than once.
func (a *Attachment) Close() error {
	a.probes.mu.Lock()
	delete(a.probes.attachments, a)
	a.probes.mu.Unlock()
	return a.closeLinks()
}

func (a *Attachment) closeLinks() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	a.links = nil
	return errors.Join(errs...)
}

// SetDeadline makes later Reads return ErrDeadline once t has passed; the
// zero time waits forever. Call it only from the goroutine that reads: it
// waits for a blocked Read.
func (p *Probes) SetDeadline(t time.Time) { p.reader.SetDeadline(t) }

// Flush wakes a blocked Read: Reads return the records already in the
// ringbuf, then ErrFlushed once. Safe from any goroutine.
func (p *Probes) Flush() error { return p.reader.Flush() }

// Read blocks until the next record and decodes it into dst.
func (p *Probes) Read(dst *Record) error {
	if err := p.reader.ReadInto(&p.record); err != nil {
		switch {
		case errors.Is(err, ringbuf.ErrClosed):
			return ErrClosed
		case errors.Is(err, os.ErrDeadlineExceeded):
			return ErrDeadline
		case errors.Is(err, ringbuf.ErrFlushed):
			return ErrFlushed
		}
		return fmt.Errorf("reading scope record: %w", err)
	}
	raw := p.record.RawSample
	if len(raw) < recordSize {
		return fmt.Errorf("reading scope record: %d bytes, want %d", len(raw), recordSize)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&p.raw)), recordSize), raw)
	r := &p.raw
	dst.StartNs, dst.EndNs = r.StartNs, r.EndNs
	dst.PID, dst.TID, dst.ProbeID, dst.Nested = r.Pid, r.Tid, r.ProbeId, r.Nested
	dst.MainThread = r.Flags&recordMainThread != 0
	dst.Comm = commString(&r.Comm)
	return nil
}

func commString(comm *[16]int8) string {
	n := 0
	for n < len(comm) && comm[n] != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(&comm[0])), n))
}

// Counters sums the BPF counters over all CPUs.
func (p *Probes) Counters() (Counters, error) {
	v, err := counters.Sum(p.objs.Counters, counterMax)
	if err != nil {
		return Counters{}, fmt.Errorf("reading scope counters: %w", err)
	}
	return Counters{
		Records:          v[counterRecords],
		LostRingbuf:      v[counterLostRingbuf],
		ExitWithoutEntry: v[counterExitNoEntry],
		Short:            v[counterShort],
		ScopeFull:        v[counterScopeFull],
		Filtered:         v[counterFiltered],
	}, nil
}

// Fill writes count synthetic records of probeID into the ringbuf from BPF
// (BPF_PROG_TEST_RUN), to benchmark the user-space path. It needs
// Options.LoadFiller.
func (p *Probes) Fill(count, probeID uint32) error {
	if p.objs.FillRecords == nil {
		return errors.New("filling records: loaded without LoadFiller")
	}
	args := uprobeFillArgs{Count: count, ProbeId: probeID}
	ctx := unsafe.Slice((*byte)(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	if _, err := p.objs.FillRecords.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
		return fmt.Errorf("filling records: %w", err)
	}
	return nil
}

// ProgramIDs returns the kernel ids of the entry and exit programs (their
// uprobe_multi copies included), so tests can look for links left behind.
func (p *Probes) ProgramIDs() ([]ebpf.ProgramID, error) {
	var ids []ebpf.ProgramID
	progs := []*ebpf.Program{p.objs.ScopeEntry, p.objs.ScopeExit, p.entryMulti, p.exitMulti}
	p.mu.Lock()
	for _, sp := range p.fixed {
		progs = append(progs, sp.entry, sp.exit)
	}
	p.mu.Unlock()
	for _, prog := range progs {
		if prog == nil {
			continue
		}
		info, err := prog.Info()
		if err != nil {
			return nil, fmt.Errorf("reading program info: %w", err)
		}
		id, _ := info.ID()
		ids = append(ids, id)
	}
	return ids, nil
}

// Close detaches every attachment, stops Read and frees the maps and
// programs. It is safe to call more than once.
func (p *Probes) Close() error {
	p.mu.Lock()
	p.closed = true
	attachments := p.attachments
	p.attachments = map[*Attachment]struct{}{}
	p.mu.Unlock()
	var errs []error
	for a := range attachments {
		errs = append(errs, a.closeLinks())
	}
	// The reader stays set: a concurrent or later Read must see it closed.
	if p.reader != nil {
		errs = append(errs, p.reader.Close())
	}
	p.mu.Lock()
	for cookie, sp := range p.fixed {
		errs = append(errs, sp.close())
		delete(p.fixed, cookie)
	}
	p.mu.Unlock()
	errs = append(errs, p.objs.Close(), p.entryMulti.Close(), p.exitMulti.Close())
	return errors.Join(errs...)
}
