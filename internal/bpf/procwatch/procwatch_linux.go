package procwatch

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/counters"
	"github.com/bpfcol/bpfcol/internal/bpf/ringrec"
)

// ErrClosed is returned by Read once the Watcher is closed.
var ErrClosed = ringrec.ErrClosed

// Watcher is the loaded and attached pair of tracepoint programs.
type Watcher struct {
	objs   proceventsObjects
	links  []link.Link
	reader *ringrec.Reader[proceventsProcEvent]
}

// New loads the programs and attaches them to the sched_process_exec and
// sched_process_exit raw tracepoints. Events flow before New returns.
func New() (_ *Watcher, err error) {
	w := &Watcher{}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	if err := loadProceventsObjects(&w.objs, nil); err != nil {
		return nil, fmt.Errorf("loading process event programs: %w", err)
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
	default:
		return fmt.Errorf("reading process event: unknown kind %d", ev.Kind)
	}
	dst.PID = ev.Pid
	dst.Exe = ExeFile{}
	if ev.ExeIno != 0 {
		// The kernel's internal dev_t is major << 20 | minor.
		dst.Exe = ExeFile{
			Dev:     unix.Mkdev(uint32(ev.ExeDev>>20), uint32(ev.ExeDev&(1<<20-1))),
			Ino:     ev.ExeIno,
			Size:    ev.ExeSize,
			ModTime: time.Unix(ev.ExeMtimeSec, int64(ev.ExeMtimeNsec)),
		}
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
	errs = append(errs, w.reader.Close())
	errs = append(errs, w.objs.Close())
	return errors.Join(errs...)
}
