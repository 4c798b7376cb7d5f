package procwatch

import (
	"os/exec"
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
