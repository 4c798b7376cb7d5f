package process

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestSnapshotOfRealProcess reads a real child's mappings from /proc, lets
// it exit and be reaped, and opens its executable from the snapshot.
func TestSnapshotOfRealProcess(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err == nil {
		sleep, err = filepath.EvalSymlinks(sleep)
	}
	if err != nil {
		t.Fatalf("finding sleep: %v", err)
	}
	proc, err := os.StartProcess(sleep, []string{"sleep", "60"}, &os.ProcAttr{})
	if err != nil {
		t.Fatalf("starting sleep: %v", err)
	}
	s := NewSnapshots(SnapshotConfig{Linger: time.Minute})
	defer s.Close()
	waitExec(t, proc.Pid, sleep)
	if !s.Take(proc.Pid, "", 0) {
		t.Fatal("no snapshot of a live process")
	}
	proc.Kill()
	proc.Wait()
	s.Exited(proc.Pid, time.Now(), 0)
	snap, ok := s.Get(proc.Pid, 0)
	if !ok {
		t.Fatal("snapshot gone with the process")
	}
	wf, err := os.Open(sleep)
	if err != nil {
		t.Fatal(err)
	}
	want, err := StatFile(wf)
	wf.Close()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for i := range snap.Mappings {
		m := &snap.Mappings[i]
		if m.Key() != want.FileKey {
			continue
		}
		found = true
		f, err := s.Open(proc.Pid, m)
		if err != nil {
			t.Fatalf("opening sleep's executable after it exited: %v", err)
		}
		id, err := StatFile(f)
		f.Close()
		if err != nil || id.FileKey != want.FileKey {
			t.Fatalf("opened %+v (%v), want %s %+v", id, err, sleep, want)
		}
	}
	if !found {
		t.Fatalf("no mapping of %s %+v in %+v", sleep, want, snap.Mappings)
	}
}

// waitExec waits until pid runs path (the exec after fork is not instant).
func waitExec(t *testing.T, pid int, path string) {
	t.Helper()
	for range 1000 {
		if p, err := ExecutablePath(pid); err == nil && p == path {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("pid %d never ran %s", pid, path)
}
