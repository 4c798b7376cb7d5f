//go:build linux && (amd64 || arm64)

package procwatch

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestExecAndExitOfChild runs a real child and waits for both its events.
func TestExecAndExitOfChild(t *testing.T) {
	testenv.RequireBPF(t)
	w, err := New(Options{})
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
				checkFile(t, ev.File, exe)
				if ev.Path != "/bin/true" {
					t.Errorf("exec event path %q, want /bin/true", ev.Path)
				}
				if ev.KTime == 0 {
					t.Error("exec event without a time")
				}
				if ev.ParentPID != uint32(os.Getpid()) {
					t.Errorf("exec event parent %d, want the test process %d", ev.ParentPID, os.Getpid())
				}
			case Exit:
				if ev.ParentPID != 0 {
					t.Errorf("exit event parent %d, want none", ev.ParentPID)
				}
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

// checkFile compares an event's file identity with stat(2).
func checkFile(t *testing.T, got process.FileID, fi os.FileInfo) {
	t.Helper()
	want, _ := process.FileIDOf(fi)
	if !got.Same(want) {
		t.Errorf("exec event file %+v, stat says %+v", got, want)
	}
}

// TestMappings runs a dynamically linked program and checks the executable
// mappings each mapping source reports: execve's own (the executable, in
// execve) and ld.so's loading of libc after the exec event, with the file's
// identity, and with LSM its path. A source the kernel refuses must fall
// back to the next one with an error naming it; the syscall source needs
// only raw tracepoints and must work wherever BPF does.
func TestMappings(t *testing.T) {
	testenv.RequireBPF(t)
	sources := []MappingSource{MappingsLSM, MappingsFentry, MappingsSyscall}
	for i, source := range sources {
		t.Run(string(source), func(t *testing.T) {
			w, err := New(Options{Mappings: source})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if w.Mappings() != source {
				if source == MappingsSyscall {
					t.Fatalf("mappings seen by %q: %v", w.Mappings(), w.MappingsError())
				}
				if w.Mappings() != sources[i+1] && w.MappingsError() == nil {
					t.Fatalf("fell back to %q without a reason", w.Mappings())
				}
				if !strings.Contains(w.MappingsError().Error(), string(source)) {
					t.Fatalf("the reason does not name %s: %v", source, w.MappingsError())
				}
				t.Logf("this kernel refuses %s, falling back to %s: %v", source, w.Mappings(), w.MappingsError())
				return
			}
			events := make(chan Event, 4096)
			go func() {
				var ev Event
				for w.Read(&ev) == nil {
					events <- ev
				}
				close(events)
			}()
			cmd := exec.Command("/usr/bin/true")
			if err := cmd.Run(); err != nil {
				t.Fatal(err)
			}
			pid := uint32(cmd.Process.Pid)
			exeInfo, err := os.Stat("/usr/bin/true")
			if err != nil {
				t.Fatal(err)
			}
			exeID, _ := process.FileIDOf(exeInfo)
			var sawExeMap, sawExec, sawLib bool
			timeout := time.After(10 * time.Second)
			for !sawLib {
				select {
				case ev := <-events:
					if ev.PID != pid {
						continue
					}
					switch ev.Kind {
					case MapExec:
						if ev.File.Ino == 0 || ev.KTime == 0 {
							t.Fatalf("mapping event without identity or time: %+v", ev)
						}
						if source == MappingsLSM && ev.Path == "" {
							t.Fatalf("LSM mapping event without a path: %+v", ev)
						}
						if source == MappingsFentry && ev.Path != "" {
							t.Fatalf("fentry mapping event with a path: %+v", ev)
						}
						if ev.Path != "" {
							fi, err := os.Stat(ev.Path)
							if err != nil {
								t.Fatal(err)
							}
							checkFile(t, ev.File, fi)
						}
						if ev.File.Same(exeID) {
							if !ev.InExecve || sawExec {
								t.Fatalf("executable mapped outside execve: %+v", ev)
							}
							if source == MappingsLSM && ev.Path != "/usr/bin/true" {
								t.Fatalf("executable mapped as %q", ev.Path)
							}
							sawExeMap = true
							continue
						}
						if !ev.InExecve {
							if !sawExec {
								t.Fatalf("library mapped before the exec event: %+v", ev)
							}
							sawLib = true
						}
					case Exec:
						if !sawExeMap && source != MappingsSyscall {
							t.Fatal("exec event before the executable's mapping")
						}
						sawExec = true
					case Exit:
						t.Fatalf("exit before a library was mapped (exe mapped %v, exec %v)", sawExeMap, sawExec)
					}
				case <-timeout:
					t.Fatalf("events of pid %d: exe mapped %v, exec %v, library %v", pid, sawExeMap, sawExec, sawLib)
				}
			}
		})
	}
}

// TestNoMappings checks the fallback: exec and exit only.
func TestNoMappings(t *testing.T) {
	testenv.RequireBPF(t)
	w, err := New(Options{NoMappings: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Mappings() != MappingsNone {
		t.Fatalf("mappings %q", w.Mappings())
	}
}
