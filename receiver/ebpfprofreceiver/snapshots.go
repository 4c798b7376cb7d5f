package ebpfprofreceiver

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/procwatch"
	"github.com/bpfcol/bpfcol/internal/process"
)

const (
	// maxSnapshots, maxSnapshotBytes and maxSnapshotFiles bound the
	// mappings kept of processes (process.Snapshots): a snapshot is a
	// few hundred bytes to a few KiB, a held file one descriptor.
	maxSnapshots     = 4096
	maxSnapshotBytes = 4 << 20
	maxSnapshotFiles = 256
	// rereadAfter is when a process's mappings are read again after its
	// exec: the exec event comes before ld.so maps the libraries.
	rereadAfter = 5 * time.Millisecond
	// rereadQueue bounds the processes waiting for that second read; an
	// exec beyond it keeps its first read only (counted).
	rereadQueue = 1024
)

// startSnapshots reads each process's mappings when it execs, so that the
// samples of a process that exited before the drain read them can still be
// mapped and named (the aggregator reads /proc when it first sees a pid,
// up to a drain period and more after the sample). Without the process
// watcher the receiver runs as before, short-lived processes' user frames
// unnamed.
func (r *profilesReceiver) startSnapshots() {
	r.snapshots = process.NewSnapshots(process.SnapshotConfig{
		MaxProcesses: maxSnapshots,
		MaxBytes:     maxSnapshotBytes,
		MaxFiles:     maxSnapshotFiles,
		// A process's last samples are read within a drain period and
		// reported at the end of the interval they fall in.
		Linger: r.cfg.ReportInterval + 2*drainInterval,
	})
	w, err := procwatch.New(procwatch.Options{NoMappings: true})
	if err != nil {
		r.set.Logger.Warn("mappings of short-lived processes not kept: their user frames stay unnamed", zap.Error(err))
		return
	}
	r.procWatch = w
	rereads := make(chan rereadReq, rereadQueue)
	r.wg.Add(2)
	go r.watchProcesses(w, rereads)
	go r.rereadProcesses(rereads)
}

type rereadReq struct {
	pid int
	due time.Time
}

// watchProcesses snapshots each exec'd process and notes each exit, until
// the watcher is closed.
func (r *profilesReceiver) watchProcesses(w *procwatch.Watcher, rereads chan<- rereadReq) {
	defer r.wg.Done()
	defer close(rereads)
	var ev procwatch.Event
	for {
		if err := w.Read(&ev); err != nil {
			if !errors.Is(err, procwatch.ErrClosed) {
				r.set.Logger.Warn("process events stopped: mappings of short-lived processes no longer kept", zap.Error(err))
			}
			return
		}
		pid := int(ev.PID)
		switch ev.Kind {
		case procwatch.Exec:
			// The event's path may be relative; the snapshot reads
			// /proc/PID/exe instead.
			if r.snapshots.Take(pid, "", ev.KTime) {
				select {
				case rereads <- rereadReq{pid: pid, due: time.Now().Add(rereadAfter)}:
				default:
					r.rereadsSkipped.Add(1)
				}
			}
		case procwatch.Exit:
			r.snapshots.Exited(pid, time.Now(), ev.KTime)
		}
	}
}

// rereadProcesses reads a process's mappings again a moment after its
// exec, with the libraries ld.so mapped since. Requests come in the order
// they fall due.
func (r *profilesReceiver) rereadProcesses(rereads <-chan rereadReq) {
	defer r.wg.Done()
	for req := range rereads {
		time.Sleep(time.Until(req.due))
		r.snapshots.Refresh(req.pid)
	}
}
