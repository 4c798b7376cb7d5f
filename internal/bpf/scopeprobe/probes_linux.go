//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"

	"github.com/bpfcol/bpfcol/internal/bpf/ringrec"
	"github.com/bpfcol/bpfcol/internal/bpf/support"
)

const (
	defaultMaxScopes = 16384
	defaultRingBytes = 1 << 20
	// maxPIDFilter bounds the pid filter map.
	maxPIDFilter = 4096
)

// Probes are the loaded scope programs and maps. Attach puts them on
// binaries; Read returns the records.
type Probes struct {
	objs   uprobeObjects
	reader *ringrec.Reader[uprobeScopeRecord]

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

	// expedite, when set, sets rcu_expedited around Attach's
	// registrations (Options.ExpediteAttach).
	expedite *expediter
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
	ringBytes := opts.RingBufferBytes
	if ringBytes <= 0 {
		ringBytes = defaultRingBytes
	}
	spec.Maps[uprobeMapScopes].MaxEntries = uint32(maxScopes)
	spec.Maps[uprobeMapSettings].MaxEntries = uint32(len(opts.Settings))
	spec.Maps[uprobeMapPidFilter].MaxEntries = maxPIDFilter
	spec.Maps[uprobeMapRecords].MaxEntries = ringrec.Size(ringBytes)

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
	if p.reader, err = ringrec.NewReader[uprobeScopeRecord](p.objs.Records, "scope record"); err != nil {
		return nil, err
	}
	if opts.ExpediteAttach {
		if p.expedite, err = openExpediter(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// load loads the maps and programs into p: the fill program only when
// asked, the scope programs once more for uprobe_multi links when the kernel
// has them, and empty programs in their place for floor benchmarks.
func (p *Probes) load(spec *ebpf.CollectionSpec, opts Options) error {
	prepareBenchmarkPrograms(spec, opts)
	// Kernels before 6.2 refuse task storage in uprobe programs: thread
	// scopes then go to the scopes map with the goroutine ones.
	if features.HaveProgramHelper(ebpf.Kprobe, asm.FnTaskStorageGet) == nil {
		if err := spec.Variables[uprobeVarThreadStorage].Set(true); err != nil {
			return fmt.Errorf("enabling thread scopes in task storage: %w", err)
		}
	}
	var replace map[string]*ebpf.Map
	if opts.Scopes != nil {
		spec.Maps[uprobeMapOpenScopes].MaxEntries = opts.Scopes.MaxEntries()
		if err := spec.Variables[uprobeVarScopeLinks].Set(true); err != nil {
			return fmt.Errorf("enabling scope links: %w", err)
		}
		if err := spec.Variables[uprobeVarProbeIdBase].Set(opts.ScopeProbeBase); err != nil {
			return fmt.Errorf("setting scope probe id base: %w", err)
		}
		replace = map[string]*ebpf.Map{uprobeMapOpenScopes: opts.Scopes}
	}
	if opts.WakeupBytes > 0 {
		if err := spec.Variables[uprobeVarWakeupBytes].Set(uint64(opts.WakeupBytes)); err != nil {
			return fmt.Errorf("setting ringbuf wakeup threshold: %w", err)
		}
	}
	multi := !opts.PerfEventUprobes && features.HaveBPFLinkUprobeMulti() == nil
	if multi {
		addMultiPrograms(spec)
	}
	if !opts.EmptyPrograms {
		p.copySpec = spec.Copy()
		p.copySpec.Programs = map[string]*ebpf.ProgramSpec{}
		for _, name := range scopeProgramNames(multi) {
			p.copySpec.Programs[name] = spec.Programs[name].Copy()
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: replace, Cache: support.KernelTypes()})
	if err != nil {
		return fmt.Errorf("loading scope probes: %w", explainPermission(err))
	}
	// Close releases whatever was not detached below.
	defer coll.Close()
	o := &p.objs
	for name, dst := range map[string]**ebpf.Map{
		uprobeMapCounters: &o.Counters, uprobeMapPidFilter: &o.PidFilter, uprobeMapRecords: &o.Records,
		uprobeMapScopes: &o.Scopes, uprobeMapSettings: &o.Settings, uprobeMapThreadScopes: &o.ThreadScopes,
		uprobeMapOpenScopes: &o.OpenScopes,
	} {
		*dst = coll.DetachMap(name)
	}
	p.sharedMaps = map[string]*ebpf.Map{
		uprobeMapCounters: o.Counters, uprobeMapPidFilter: o.PidFilter, uprobeMapRecords: o.Records,
		uprobeMapScopes: o.Scopes, uprobeMapSettings: o.Settings, uprobeMapThreadScopes: o.ThreadScopes,
		uprobeMapOpenScopes: o.OpenScopes,
	}
	for name, dst := range map[string]**ebpf.Program{
		uprobeProgScopeEntry: &o.ScopeEntry, uprobeProgScopeExit: &o.ScopeExit, uprobeProgFillRecords: &o.FillRecords,
		uprobeProgScopeEntry + multiSuffix: &p.entryMulti, uprobeProgScopeExit + multiSuffix: &p.exitMulti,
	} {
		*dst = coll.DetachProgram(name)
	}
	return nil
}

// scopeProgramNames names the entry and exit programs of an attach mode in
// the collection spec.
func scopeProgramNames(multi bool) [2]string {
	if multi {
		return [2]string{uprobeProgScopeEntry + multiSuffix, uprobeProgScopeExit + multiSuffix}
	}
	return [2]string{uprobeProgScopeEntry, uprobeProgScopeExit}
}

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
	names := scopeProgramNames(multi)
	sp := scopePrograms{coll.DetachProgram(names[0]), coll.DetachProgram(names[1])}
	p.fixed[cookie] = sp
	return sp, nil
}

func (p *Probes) writeSettings(settings []Setting) error {
	pids := 0
	for id, s := range settings {
		if s.MinDuration < 0 {
			return fmt.Errorf("probe %d: negative min duration %s", id, s.MinDuration)
		}
		v := uprobeProbeSetting{MinDurationNs: uint64(s.MinDuration)}
		if s.MainThreadOnly {
			v.Flags |= uint32(uprobeSettingFlagSETTING_MAIN_THREAD_ONLY)
		}
		if len(s.PIDs) > 0 {
			v.Flags |= uint32(uprobeSettingFlagSETTING_PID_FILTER)
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
	errs = append(errs, p.reader.Close())
	p.mu.Lock()
	for cookie, sp := range p.fixed {
		errs = append(errs, sp.close())
		delete(p.fixed, cookie)
	}
	p.mu.Unlock()
	errs = append(errs, p.objs.Close(), p.entryMulti.Close(), p.exitMulti.Close())
	if p.expedite != nil {
		errs = append(errs, p.expedite.close())
	}
	return errors.Join(errs...)
}

// ExpediteStats returns what expediting registrations did so far; zero
// unless Options.ExpediteAttach.
func (p *Probes) ExpediteStats() ExpediteStats {
	if p.expedite == nil {
		return ExpediteStats{}
	}
	return p.expedite.stats()
}
