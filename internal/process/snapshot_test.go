package process

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fakeProcs stands in for /proc where the test needs a process to vanish
// at a chosen moment: pid → its mappings, each file mapping backed by a
// real file of the test.
type fakeProcs struct {
	maps  map[int][]Mapping
	files map[FileKey]string
	opens int
}

var errGone = errors.New("no such process")

func (f *fakeProcs) read(pid int) ([]Mapping, error) {
	m, ok := f.maps[pid]
	if !ok {
		return nil, errGone
	}
	return m, nil
}

func (f *fakeProcs) open(pid int, m *Mapping) (*os.File, error) {
	if _, ok := f.maps[pid]; !ok {
		return nil, errGone
	}
	f.opens++
	return os.Open(f.files[m.Key()])
}

func newFake(t *testing.T, files int) (*fakeProcs, []Mapping) {
	t.Helper()
	f := &fakeProcs{maps: map[int][]Mapping{}, files: map[FileKey]string{}}
	var maps []Mapping
	for i := range files {
		p := filepath.Join(t.TempDir(), "bin"+strconv.Itoa(i))
		if err := os.WriteFile(p, []byte("contents of "+p), 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		id, err := StatFile(file)
		file.Close()
		if err != nil {
			t.Fatal(err)
		}
		m := Mapping{Start: uint64(i+1) << 20, End: uint64(i+2) << 20, Perms: "r-xp", Dev: id.Dev, Inode: id.Ino, Path: p}
		f.files[m.Key()] = p
		maps = append(maps, m)
	}
	// A data mapping is not kept.
	maps = append(maps, Mapping{Start: 1 << 40, End: 1<<40 + 4096, Perms: "rw-p"})
	return f, maps
}

func newTestSnapshots(f *fakeProcs, cfg SnapshotConfig) *Snapshots {
	cfg.read, cfg.open = f.read, f.open
	cfg.exe = func(int) (string, error) { return "", errGone }
	cfg.container = func(int) (string, error) { return "", nil }
	return NewSnapshots(cfg)
}

func TestSnapshotOutlivesProcessForLinger(t *testing.T) {
	f, maps := newFake(t, 2)
	s := newTestSnapshots(f, SnapshotConfig{Linger: time.Second})
	defer s.Close()
	f.maps[7] = maps
	if !s.Take(7, "/bin/x", 0) {
		t.Fatal("Take of a live process read nothing")
	}
	delete(f.maps, 7) // it exits
	exited := time.Now()
	s.Exited(7, exited, 0)
	if s.Take(7, "", 0) {
		t.Error("Take of a gone process said it read")
	}
	snap, ok := s.Get(7, 0)
	if !ok || len(snap.Mappings) != 2 || snap.ExePath != "/bin/x" {
		t.Fatalf("snapshot after exit = %+v, %v; want the 2 executable mappings of /bin/x", snap, ok)
	}
	// Its files open from what the snapshot holds, though /proc has none.
	for i := range snap.Mappings {
		m := &snap.Mappings[i]
		file, err := s.Open(7, m)
		if err != nil {
			t.Fatalf("opening %s after exit: %v", m.Path, err)
		}
		got, _ := io.ReadAll(io.NewSectionReader(file, 0, 1<<20))
		file.Close()
		if string(got) != "contents of "+m.Path {
			t.Errorf("file opened for %s holds %q", m.Path, got)
		}
	}
	s.Expire(exited.Add(time.Second / 2))
	if _, ok := s.Get(7, 0); !ok {
		t.Fatal("snapshot dropped before Linger passed")
	}
	s.Expire(exited.Add(2 * time.Second))
	if _, ok := s.Get(7, 0); ok {
		t.Fatal("snapshot kept after Linger passed")
	}
	st := s.Stats()
	if st.Processes != 0 || st.Files != 0 || st.Expired != 1 || st.Dropped != 0 {
		t.Errorf("stats after expiry = %+v; want nothing held, 1 expired", st)
	}
	if _, err := s.Open(7, &snap.Mappings[0]); err == nil {
		t.Error("a file was opened for a process whose snapshot is gone")
	}
}

func TestSnapshotsBounded(t *testing.T) {
	f, maps := newFake(t, 3)
	s := newTestSnapshots(f, SnapshotConfig{MaxProcesses: 4, MaxFiles: 2, Linger: time.Hour})
	defer s.Close()
	for pid := 1; pid <= 6; pid++ {
		f.maps[pid] = maps
		s.Take(pid, "/bin/x", 0)
		if pid == 2 {
			s.Exited(2, time.Now(), 0)
		}
	}
	st := s.Stats()
	if st.Processes != 4 || st.Dropped != 2 {
		t.Fatalf("stats = %+v; want 4 processes kept and 2 dropped", st)
	}
	// The exited process goes first, then the oldest.
	for pid, want := range map[int]bool{1: false, 2: false, 3: true, 6: true} {
		if _, ok := s.Get(pid, 0); ok != want {
			t.Errorf("snapshot of pid %d kept = %v, want %v", pid, ok, want)
		}
	}
	// Two of the three files are held, shared by every snapshot, each
	// opened once; the third is not opened at all.
	if st.Files != 2 {
		t.Errorf("%d files held, want 2", st.Files)
	}
	if st.FilesNotHeld != 6 {
		t.Errorf("%d files not held, want 6 (the third file of 6 processes)", st.FilesNotHeld)
	}
	if f.opens != 2 {
		t.Errorf("%d opens, want 2 (the held files, once)", f.opens)
	}
}

func TestSnapshotsBoundedByBytes(t *testing.T) {
	f, maps := newFake(t, 3)
	one := newTestSnapshots(f, SnapshotConfig{Linger: time.Hour})
	f.maps[1] = maps
	one.Take(1, "/bin/x", 0)
	cost := one.Stats().Bytes
	one.Close()
	if cost <= 0 {
		t.Fatalf("a snapshot of %d mappings costs %d bytes", len(maps), cost)
	}
	s := newTestSnapshots(f, SnapshotConfig{MaxBytes: 3*cost + cost/2, Linger: time.Hour})
	defer s.Close()
	for pid := 1; pid <= 5; pid++ {
		f.maps[pid] = maps
		s.Take(pid, "/bin/x", 0)
	}
	st := s.Stats()
	if st.Processes != 3 || st.Dropped != 2 || st.Bytes != 3*cost {
		t.Errorf("stats = %+v; want 3 snapshots of %d bytes kept, 2 dropped", st, cost)
	}
	s.Close()
	if st := s.Stats(); st.Bytes != 0 || st.Files != 0 {
		t.Errorf("after Close: %+v", st)
	}
}

func TestSnapshotHoldsOnlyTheMappedFile(t *testing.T) {
	f, maps := newFake(t, 1)
	s := newTestSnapshots(f, SnapshotConfig{Linger: time.Hour})
	defer s.Close()
	// The path now names another file than the one mapped.
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("another file"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.files[maps[0].Key()] = other
	f.maps[3] = maps
	s.Take(3, "/bin/x", 0)
	delete(f.maps, 3)
	if st := s.Stats(); st.Files != 0 || st.FilesNotHeld != 1 {
		t.Fatalf("stats = %+v; want the replaced file not held", st)
	}
	if file, err := s.Open(3, &maps[0]); err == nil {
		file.Close()
		t.Fatal("a file other than the mapped one was opened after exit")
	}
}

func TestSnapshotRefreshSkipsExited(t *testing.T) {
	f, maps := newFake(t, 1)
	s := newTestSnapshots(f, SnapshotConfig{Linger: time.Hour})
	defer s.Close()
	f.maps[9] = maps[:1]
	s.Take(9, "/bin/x", 0)
	f.maps[9] = maps // ld.so mapped more since the exec
	s.Refresh(9)
	if st := s.Stats(); st.Taken != 2 {
		t.Fatalf("Refresh of a live process: %d reads, want 2", st.Taken)
	}
	s.Exited(9, time.Now(), 0)
	s.Refresh(9) // a late re-read must not revive the snapshot
	s.Refresh(10)
	if st := s.Stats(); st.Taken != 2 {
		t.Errorf("Refresh read an exited or unknown process: %d reads, want 2", st.Taken)
	}
	s.Expire(time.Now().Add(2 * time.Hour))
	if _, ok := s.Get(9, 0); ok {
		t.Error("snapshot of an exited process refreshed after exit never expires")
	}
}

func TestSnapshotCoversItsLifetimeOnly(t *testing.T) {
	f, maps := newFake(t, 1)
	s := newTestSnapshots(f, SnapshotConfig{Linger: time.Hour})
	defer s.Close()
	f.maps[5] = maps
	const exec, exit = uint64(1e9), uint64(2e9)
	s.Take(5, "/bin/x", exec)
	delete(f.maps, 5)
	s.Exited(5, time.Now(), exit)
	for _, c := range []struct {
		ktime uint64
		want  bool
	}{
		{exec - 1, false}, // the image before the exec
		{exec, true},
		{exit, true},
		{exit + uint64(exitSlack), true},
		{exit + uint64(time.Second), false}, // a later process with the pid
	} {
		if _, ok := s.Get(5, c.ktime); ok != c.want {
			t.Errorf("Get at %d (exec %d, exit %d) = %v, want %v", c.ktime, exec, exit, ok, c.want)
		}
	}
}

// sighted returns the sighting of a process the sampler read: maps'
// executable mappings named by their files alone.
func sighted(pid int, image, exec uint64, maps []Mapping, cgroup uint64) *Sighting {
	sg := &Sighting{PID: pid, Image: image, Exec: exec, CgroupID: cgroup}
	for _, m := range maps {
		if m.Executable() {
			m.Path = ""
			sg.Mappings = append(sg.Mappings, m)
		}
	}
	return sg
}

// TestRecordNamesFromWhatItSaw records what the sampler read of processes
// without reading their mappings: a file is named from the process once,
// then by what was seen; a container once per cgroup; a file that cannot
// be named is left out; the same image keeps its start, a new one starts
// at its sighting.
func TestRecordNamesFromWhatItSaw(t *testing.T) {
	f, maps := newFake(t, 2)
	names, containers := 0, 0
	s := newTestSnapshots(f, SnapshotConfig{Linger: time.Hour})
	defer s.Close()
	s.cfg.read = func(int) ([]Mapping, error) { t.Fatal("Record read /proc/PID/maps"); return nil, nil }
	s.cfg.name = func(pid int, m *Mapping) (string, error) {
		names++
		if _, ok := f.maps[pid]; !ok {
			return "", errGone
		}
		return f.files[m.Key()], nil
	}
	s.cfg.exe = func(int) (string, error) { return "/bin/x", nil }
	s.cfg.container = func(int) (string, error) { containers++; return "c0ffee", nil }

	f.maps[1], f.maps[2] = maps, maps
	if !s.Record(sighted(1, 0xa, 100, maps, 7)) || !s.Record(sighted(2, 0xb, 200, maps, 7)) {
		t.Fatal("Record kept nothing")
	}
	if names != 2 || containers != 1 {
		t.Fatalf("%d files named from a process and %d containers read for two processes of the same 2 files and cgroup, want 2 and 1", names, containers)
	}
	snap, ok := s.Get(2, 0)
	if !ok || len(snap.Mappings) != 2 || snap.ExePath != "/bin/x" || snap.ContainerID != "c0ffee" || snap.Exec != 200 {
		t.Fatalf("snapshot %+v (%v)", snap, ok)
	}
	for i, m := range snap.Mappings {
		if m.Path != maps[i].Path {
			t.Fatalf("mapping %d named %q, want %q", i, m.Path, maps[i].Path)
		}
	}
	// Its files are held: they open after the process is gone.
	delete(f.maps, 2)
	if file, err := s.Open(2, &snap.Mappings[0]); err != nil {
		t.Fatalf("opening a recorded file after exit: %v", err)
	} else {
		file.Close()
	}

	// More mappings of the same image keep its start, in a later
	// snapshot (its readers read it again); a new image starts at its
	// sighting.
	seq1, seq2 := s.Seq(1), s.Seq(2)
	if seq1 == 0 || seq2 == seq1 || s.Seq(99) != 0 {
		t.Errorf("snapshot numbers %d and %d of two processes, %d of none", seq1, seq2, s.Seq(99))
	}
	s.Record(sighted(1, 0xa, 150, maps, 7))
	if snap, _ := s.Get(1, 0); snap.Exec != 100 {
		t.Errorf("the same image's start moved to %d, want 100", snap.Exec)
	}
	if s.Seq(1) <= seq1 || s.Seq(1) <= seq2 || s.Seq(2) != seq2 {
		t.Errorf("snapshot numbers %d, %d after pid 1 was recorded again (were %d, %d): a reader would keep the first", s.Seq(1), s.Seq(2), seq1, seq2)
	}
	s.Record(sighted(1, 0xc, 300, maps, 7))
	if snap, _ := s.Get(1, 0); snap.Exec != 300 {
		t.Errorf("a new image starts at %d, want 300", snap.Exec)
	}

	// A file never seen, of a process gone, cannot be named: left out.
	_, more := newFake(t, 1)
	gone := sighted(3, 0xd, 400, more, 7)
	if !s.Record(gone) {
		t.Fatal("Record kept nothing of a process gone")
	}
	if snap, _ := s.Get(3, 0); len(snap.Mappings) != 0 {
		t.Errorf("a file that could not be named was kept: %+v", snap.Mappings)
	}
	if st := s.Stats(); st.Recorded != 5 || st.Taken != 0 {
		t.Errorf("stats %+v, want 5 recorded, none taken", st)
	}
}
