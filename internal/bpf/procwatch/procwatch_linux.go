//go:build linux && (amd64 || arm64)

package procwatch

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/counters"
	"github.com/bpfcol/bpfcol/internal/bpf/ringrec"
	"github.com/bpfcol/bpfcol/internal/bpf/support"
	"github.com/bpfcol/bpfcol/internal/process"
)

// ErrClosed is returned by Read once the Watcher is closed.
var ErrClosed = ringrec.ErrClosed

// Watcher is the loaded and attached set of process event programs.
type Watcher struct {
	objs     watcherObjects
	mapping  *ebpf.Program // nil with MappingsNone
	links    []link.Link
	reader   *ringrec.Reader[proceventsProcEvent]
	mappings MappingSource
	// mappingsErr says why a better mapping source was not used.
	mappingsErr error
}

// watcherObjects are the programs and maps one Watcher loads: the exec and
// exit programs, and at most one of the mapping programs.
type watcherObjects struct {
	OnExec     *ebpf.Program `ebpf:"on_exec"`
	OnExit     *ebpf.Program `ebpf:"on_exit"`
	ProcEvents *ebpf.Map     `ebpf:"proc_events"`
	Counters   *ebpf.Map     `ebpf:"counters"`
}

// Close frees what was loaded; nil members are skipped by their Close.
func (o *watcherObjects) Close() error {
	err := errors.Join(o.OnExec.Close(), o.OnExit.Close(), o.ProcEvents.Close(), o.Counters.Close())
	*o = watcherObjects{}
	return err
}

// New loads the programs and attaches them to the sched_process_exec and
// sched_process_exit raw tracepoints, and to the best mapping hook this
// kernel has (see MappingSource; Mappings tells which, and MappingsError
// why a better one failed). Events flow before New returns.
func New(opts Options) (_ *Watcher, err error) {
	spec, err := loadProcevents()
	if err != nil {
		return nil, fmt.Errorf("loading process event programs: %w", err)
	}
	sources := []MappingSource{MappingsLSM, MappingsFentry, MappingsSyscall, MappingsNone}
	if opts.NoMappings {
		sources = []MappingSource{MappingsNone}
	}
	for i, s := range sources {
		if opts.Mappings != MappingsNone && s == opts.Mappings {
			sources = sources[i:]
			break
		}
	}
	var errs []error
	for _, source := range sources {
		w, err := load(spec, source)
		if err == nil {
			w.mappingsErr = errors.Join(errs...)
			return w, nil
		}
		if source == MappingsNone {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// load loads and attaches the exec and exit programs and the mapping
// program of source.
func load(spec *ebpf.CollectionSpec, source MappingSource) (_ *Watcher, err error) {
	w := &Watcher{mappings: source}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	var progName string
	switch source {
	case MappingsLSM:
		progName = proceventsProgOnMmapFile
	case MappingsFentry:
		progName = proceventsProgOnMmapFileFentry
	case MappingsSyscall:
		progName = proceventsProgOnSysExit
	}
	if source == MappingsLSM || source == MappingsFentry {
		// The probe can fail for reasons of its own (it loads a program
		// without the attach target ours has): only its "not supported"
		// verdict is trusted, anything else is left to our own load.
		pt, feature := ebpf.LSM, "BPF LSM programs (5.7+, CONFIG_BPF_LSM)"
		if source == MappingsFentry {
			pt, feature = ebpf.Tracing, "BPF tracing programs (5.5+)"
		}
		if err := features.HaveProgramType(pt); errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("watching mappings with %s: kernel feature missing: %s: %w", source, feature, err)
		}
	}
	// Only the programs wanted are loaded: a kernel without BPF LSM
	// refuses the LSM program and must still run the others.
	spec = spec.Copy()
	for name := range spec.Programs {
		switch name {
		case proceventsProgOnExec, proceventsProgOnExit, progName:
		default:
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Cache: support.KernelTypes()})
	if err != nil {
		if progName != "" && errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("watching mappings with %s: the kernel refused the program (kernel lockdown or a security policy forbids this program type): %w", source, err)
		}
		if progName != "" {
			return nil, fmt.Errorf("watching mappings with %s: loading: %w", source, err)
		}
		return nil, fmt.Errorf("loading process event programs: %w", err)
	}
	if progName != "" {
		w.mapping = coll.DetachProgram(progName)
	}
	if err := coll.Assign(&w.objs); err != nil {
		coll.Close()
		return nil, fmt.Errorf("loading process event programs: %w", err)
	}
	coll.Close()
	var l link.Link
	switch source {
	case MappingsLSM:
		if l, err = link.AttachLSM(link.LSMOptions{Program: w.mapping}); err != nil {
			return nil, fmt.Errorf("watching mappings with %s: attaching (is \"bpf\" in the kernel's lsm= list?): %w", source, err)
		}
	case MappingsFentry:
		if l, err = link.AttachTracing(link.TracingOptions{Program: w.mapping}); err != nil {
			return nil, fmt.Errorf("watching mappings with %s: attaching (BPF trampolines): %w", source, err)
		}
	case MappingsSyscall:
		if l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_exit", Program: w.mapping}); err != nil {
			return nil, fmt.Errorf("watching mappings with %s: attaching: %w", source, err)
		}
	}
	if l != nil {
		w.links = append(w.links, l)
	}
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{
		{"sched_process_exec", w.objs.OnExec},
		{"sched_process_exit", w.objs.OnExit},
	} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp.name, Program: tp.prog})
		if err != nil {
			return nil, fmt.Errorf("attaching to raw tracepoint %s: %w", tp.name, err)
		}
		w.links = append(w.links, l)
	}
	if w.reader, err = ringrec.NewReader[proceventsProcEvent](w.objs.ProcEvents, "process event"); err != nil {
		return nil, err
	}
	return w, nil
}

// Mappings returns how the Watcher sees executable file mappings.
func (w *Watcher) Mappings() MappingSource { return w.mappings }

// MappingsError returns why mapping sources better than Mappings could
// not be used, naming the missing feature; nil when the best one is used.
func (w *Watcher) MappingsError() error { return w.mappingsErr }

// Read blocks until the next event.
func (w *Watcher) Read(dst *Event) error {
	ev, err := w.reader.Read()
	if err != nil {
		return err
	}
	switch proceventsProcEventKind(ev.Kind) {
	case proceventsProcEventKindPROC_EVENT_EXEC:
		dst.Kind = Exec
	case proceventsProcEventKindPROC_EVENT_EXIT:
		dst.Kind = Exit
	case proceventsProcEventKindPROC_EVENT_MMAP_EXEC:
		dst.Kind = MapExec
	default:
		return fmt.Errorf("reading process event: unknown kind %d", ev.Kind)
	}
	dst.PID = ev.Pid
	dst.KTime = ev.Ktime
	dst.ParentPID = 0
	if dst.Kind == Exec {
		dst.ParentPID = ev.Ppid
	}
	dst.File = process.FileID{}
	if ev.ExeIno != 0 {
		dst.File = process.FileID{
			FileKey: process.KernelFileKey(uint32(ev.ExeDev), ev.ExeIno),
			Size:    ev.ExeSize,
			ModTime: time.Unix(ev.ExeMtimeSec, int64(ev.ExeMtimeNsec)),
		}
	}
	flags := proceventsProcEventFlag(ev.Flags)
	dst.InExecve = flags&proceventsProcEventFlagPROC_EVENT_IN_EXECVE != 0
	dst.Path = ""
	if flags&proceventsProcEventFlagPROC_EVENT_HAS_PATH != 0 {
		dst.Path = cString(ev.Path[:])
	}
	return nil
}

// Counters sums the BPF counters over all CPUs.
func (w *Watcher) Counters() (Counters, error) {
	v, err := counters.Sum(w.objs.Counters, int(proceventsCounterCOUNTER_MAX))
	if err != nil {
		return Counters{}, fmt.Errorf("reading process event counters: %w", err)
	}
	return Counters{
		Events:      v[proceventsCounterCOUNTER_EVENTS],
		LostRingbuf: v[proceventsCounterCOUNTER_LOST_RINGBUF],
	}, nil
}

// Close detaches the programs, stops Read and frees the maps. It is safe to
// call more than once.
func (w *Watcher) Close() error {
	var errs []error
	for _, l := range w.links {
		errs = append(errs, l.Close())
	}
	w.links = nil
	if w.reader != nil {
		errs = append(errs, w.reader.Close())
	}
	errs = append(errs, w.objs.Close())
	if w.mapping != nil {
		errs = append(errs, w.mapping.Close())
	}
	return errors.Join(errs...)
}

// cString returns the bytes of b before the first NUL.
func cString(b []int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(b[i])
	}
	return string(buf)
}
