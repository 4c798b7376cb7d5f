package loader

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/process"
)

// Read reads pid's executable mappings from /proc and writes them into the
// sampler as those of img, the image a NoticeRead named: for kernels where
// BPF does not read them itself. Only the Run goroutine (or a test, before
// Run) calls it.
func (l *Loader) Read(pid uint32, img profiler.Image) error {
	l.loads.Add(1)
	all, err := process.ReadMappings(int(pid))
	if err == nil {
		var isNew bool
		if isNew, err = l.cfg.Sink.SetUnwindMappings(pid, img, unwindMappings(all)); isNew {
			l.processes.Add(1)
		}
	}
	// A process that exited before it was read is no failure.
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
		l.loadErrors.Add(1)
	}
	return err
}

// unwindMappings returns the executable mappings of all, lines of
// /proc/PID/maps, as the sampler holds them.
func unwindMappings(all []process.Mapping) []profiler.UnwindMapping {
	var out []profiler.UnwindMapping
	for i := range all {
		m := &all[i]
		if !m.Executable() || m.Start > process.MaxUserAddr {
			continue
		}
		um := profiler.UnwindMapping{Start: m.Start, End: m.End, FileBase: m.Start - m.Offset, Kind: profiler.MappingAnon}
		switch {
		case m.File():
			um.Kind, um.File = profiler.MappingFile, m.Key()
		case m.Path == process.VDSOPath:
			// Its table's offsets are from the image's first byte.
			um.Kind, um.FileBase = profiler.MappingVDSO, m.Start
		}
		for i, c := range []byte(m.Perms) {
			if c != '-' && i < 4 {
				um.Prot |= []uint16{profiler.ProtRead, profiler.ProtWrite, profiler.ProtExec, profiler.ProtShared}[i]
			}
		}
		if len(m.Perms) > 3 && m.Perms[3] != 's' {
			um.Prot &^= profiler.ProtShared
		}
		out = append(out, um)
	}
	return out
}
