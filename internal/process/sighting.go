package process

// The names Record remembers: files by device and inode, containers by
// cgroup.
const (
	maxPaths      = 4096
	maxContainers = 1024
)

// Sighting is what the sampler read of a process when it first sampled it
// (or its new image, after an exec, or its new mappings): nothing needs
// reading from /proc to know it.
type Sighting struct {
	PID int
	// Image tells an image of the process from the next (its address
	// space): a sighting of the same image again keeps its Exec.
	Image uint64
	// Exec is when the samples of this image may start, in ktime: the
	// process's start for a process never sighted, the sighting's time
	// for a new image.
	Exec uint64
	// Mappings are its executable mappings: those of a file named by
	// Dev and Inode alone (Record names them), "[vdso]" for the vDSO.
	Mappings []Mapping
	// Exe is its executable file, zero if unknown.
	Exe FileKey
	// CgroupID is its cgroup (v2), zero if unknown.
	CgroupID uint64
}

// Record keeps the snapshot of a process that the sampler read, in place
// of any earlier one of pid, as Take does but without reading
// /proc/PID/maps: a file is named by the path it had the last time it was
// seen, and only a file never seen is named from the process
// (/proc/PID/map_files); the container by the cgroup's id, read once per
// cgroup. The executable is read from /proc/PID/exe, its path as the
// process sees it (hard links tell apart), or named by its file when the
// process is gone. Record reports whether it kept a snapshot.
func (s *Snapshots) Record(sg *Sighting) bool {
	maps := make([]Mapping, 0, len(sg.Mappings))
	for _, m := range sg.Mappings {
		if m.Inode != 0 && m.Path == "" {
			path, ok := s.paths.Get(m.Key())
			if !ok {
				var err error
				if path, err = s.cfg.name(sg.PID, &m); err != nil {
					continue // unmapped since, or gone: not named, not kept
				}
				s.paths.Add(m.Key(), path)
			}
			m.Path = path
		}
		maps = append(maps, m)
	}
	exe, err := s.cfg.exe(sg.PID)
	if err != nil && sg.Exe.Ino != 0 {
		exe, _ = s.paths.Get(sg.Exe)
	}
	container, ok := "", false
	if sg.CgroupID != 0 {
		container, ok = s.containers.Get(sg.CgroupID)
	}
	if !ok {
		var err error
		if container, err = s.cfg.container(sg.PID); err == nil && sg.CgroupID != 0 {
			s.containers.Add(sg.CgroupID, container)
		}
	}
	exec := sg.Exec
	s.mu.Lock()
	if old := s.procs[sg.PID]; old != nil && old.image == sg.Image && sg.Image != 0 {
		exec = old.Exec // the same image, more mappings
	}
	s.mu.Unlock()
	snap := &snapshot{pid: sg.PID, image: sg.Image, Snapshot: Snapshot{Mappings: maps, ExePath: exe, ContainerID: container, Exec: exec}}
	if !s.store(sg.PID, snap, nil) {
		return false
	}
	s.mu.Lock()
	s.stats.Recorded++
	s.mu.Unlock()
	return true
}
