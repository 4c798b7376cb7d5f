package ebpfprofreceiver

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/process"
)

const (
	// maxSnapshots, maxSnapshotBytes and maxSnapshotFiles bound the
	// mappings kept of processes (process.Snapshots): a snapshot is a
	// few hundred bytes to a few KiB, a held file one descriptor.
	maxSnapshots     = 4096
	maxSnapshotBytes = 4 << 20
	maxSnapshotFiles = 256
)

// startSnapshots keeps the mappings of the processes the sampler reads,
// at their first sample (while they live, before the drain reads their
// samples), so that the samples of a process that exited before the
// aggregator saw them can still be mapped and named. Nothing happens at
// exec: a process never sampled costs nothing. It also hands the
// sampler's notices to the unwind loader (files to build, processes to
// read where BPF cannot).
func (r *profilesReceiver) startSnapshots() {
	r.snapshots = process.NewSnapshots(process.SnapshotConfig{
		MaxProcesses: maxSnapshots,
		MaxBytes:     maxSnapshotBytes,
		MaxFiles:     maxSnapshotFiles,
		// A process's last samples are read within a drain period and
		// reported at the end of the interval they fall in.
		Linger: r.cfg.ReportInterval + 2*drainInterval,
	})
	if err := r.sampler.ComposeError(); err != nil {
		r.set.Logger.Warn("processes' mappings read from /proc at their first sample, whose stack is walked with frame pointers: BPF cannot read them on this kernel",
			zap.NamedError("reason", err))
	}
	r.noticesDone = make(chan struct{})
	go r.watchNotices(r.sampler)
}

// watchNotices hands the sampler's notices on until it is closed: files
// and reads to the unwind loader, processes read and exited to the
// snapshots. It never waits for either beyond a read of /proc where the
// kernel leaves that to user space.
func (r *profilesReceiver) watchNotices(s *profiler.Sampler) {
	defer close(r.noticesDone)
	var n profiler.Notice
	var sg process.Sighting
	for {
		if err := s.ReadNotice(&n); err != nil {
			if !errors.Is(err, profiler.ErrClosed) {
				r.set.Logger.Warn("sampler notices stopped: tables no longer built, short-lived processes no longer named", zap.Error(err))
			}
			return
		}
		r.unwind.Noted(&n)
		switch n.Kind {
		case profiler.NoticeProcess:
			sighting(&n, &sg)
			if r.snapshots.Record(&sg) {
				r.mapped(n.PID, n.KtimeNs)
			}
		case profiler.NoticeRead:
			if r.snapshots.Take(int(n.PID), "", n.KtimeNs) {
				r.mapped(n.PID, n.KtimeNs)
			}
		case profiler.NoticeExit:
			r.snapshots.Exited(int(n.PID), time.Now(), n.KtimeNs)
			if r.interps != nil {
				r.interps.Forgot(n.PID)
			}
		}
	}
}

// mapped tells the interpreters of pid's executable mappings as its
// snapshot, just recorded at ktime, names them: paths they can match and
// open (through /proc/PID/map_files). They learn of a process where the
// sampler reads it, at its first sample, exec and new mapping, never at
// a sample.
func (r *profilesReceiver) mapped(pid uint32, ktime uint64) {
	if r.interps == nil {
		return
	}
	if snap, ok := r.snapshots.Get(int(pid), ktime); ok {
		r.interps.Mapped(pid, snap.Mappings)
	}
}

// sighting fills sg with what n, a NoticeProcess, tells of its process.
func sighting(n *profiler.Notice, sg *process.Sighting) {
	sg.PID = int(n.PID)
	sg.Image = n.Image.MM
	sg.Exec = n.KtimeNs
	if n.New {
		// Never sampled before: any sample of the pid since its start
		// is of this process.
		sg.Exec = n.Image.StartNs
	}
	sg.Exe, sg.CgroupID = n.Exe, n.CgroupID
	sg.Mappings = sg.Mappings[:0]
	for i := range n.Mappings {
		m := &n.Mappings[i]
		pm := process.Mapping{Start: m.Start, End: m.End, Offset: m.Offset(), Perms: perms(m.Prot)}
		switch m.Kind {
		case profiler.MappingFile:
			pm.Dev, pm.Inode = m.File.Dev, m.File.Ino
		case profiler.MappingVDSO:
			pm.Path = "[vdso]"
		}
		sg.Mappings = append(sg.Mappings, pm)
	}
}

// perms writes prot as /proc/PID/maps does ("r-xp").
func perms(prot uint16) string {
	b := []byte("---p")
	for i, bit := range []uint16{profiler.ProtRead, profiler.ProtWrite, profiler.ProtExec} {
		if prot&bit != 0 {
			b[i] = "rwx"[i]
		}
	}
	if prot&profiler.ProtShared != 0 {
		b[3] = 's'
	}
	return string(b)
}
