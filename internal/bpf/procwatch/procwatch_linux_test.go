package procwatch

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestExecAndExitOfChild runs a real child and waits for both its events.
func TestExecAndExitOfChild(t *testing.T) {
	testenv.RequireBPF(t)
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Stat(cmd.Path)
	if err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	events := make(chan Event, 1024)
	go func() {
		var ev Event
		for w.Read(&ev) == nil {
			events <- ev
		}
		close(events)
	}()
	var sawExec, sawExit bool
	timeout := time.After(10 * time.Second)
	for !sawExec || !sawExit {
		select {
		case ev := <-events:
			if ev.PID != pid {
				continue
			}
			switch ev.Kind {
			case Exec:
				if sawExit {
					t.Fatal("exit reported before exec")
				}
				sawExec = true
				checkExeFile(t, ev.Exe, exe)
			case Exit:
				sawExit = true
			}
		case <-timeout:
			t.Fatalf("events of pid %d: exec %v exit %v", pid, sawExec, sawExit)
		}
	}
	c, err := w.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Events < 2 || c.LostRingbuf != 0 {
		t.Fatalf("counters %+v", c)
	}
}

// checkExeFile compares an exec event's file identity with stat(2).
func checkExeFile(t *testing.T, got ExeFile, fi os.FileInfo) {
	t.Helper()
	st := fi.Sys().(*syscall.Stat_t)
	want := ExeFile{Dev: st.Dev, Ino: st.Ino, Size: st.Size, ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec)}
	if got.Dev != want.Dev || got.Ino != want.Ino || got.Size != want.Size || !got.ModTime.Equal(want.ModTime) {
		t.Errorf("exec event file %+v, stat says %+v", got, want)
	}
}
