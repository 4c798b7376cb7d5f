//go:build linux

package symbolize

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// waitExecMapping waits for the executable mapping of pid whose path is
// path and returns it.
func waitExecMapping(t *testing.T, pid int, path string) *process.Mapping {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		maps, err := process.ReadMappings(pid)
		if err != nil {
			t.Fatal(err)
		}
		for i := range maps {
			if maps[i].Path == path && maps[i].Executable() {
				return &maps[i]
			}
		}
	}
	t.Fatalf("no executable mapping of %s in process %d", path, pid)
	return nil
}

// checkNamedThroughMapping opens the mapping of a running process the way
// the receiver does and checks that the Symbolizer names its addresses
// exactly as llvm-symbolizer names them in truth, the same build.
func checkNamedThroughMapping(t *testing.T, pid int, m *process.Mapping, truth string) {
	t.Helper()
	f, err := process.OpenMapping(pid, m)
	if err != nil {
		t.Fatalf("opening the mapping: %v", err)
	}
	bin, err := OpenBinary(f, NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	s, err := NewSymbolizer(SymbolizerConfig{SystemDebugDir: t.TempDir(), Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ref := MappingRef{PID: pid, Path: m.Path, Key: process.FileKey{Dev: m.Dev, Ino: m.Inode}}
	seg := execSegment(t, truth)
	addrs := textAddresses(t, truth, 2000)
	want := llvmFrames(t, truth, addrs)
	named, misses := 0, 0
	for i, a := range addrs {
		l := s.Symbolize(ref, bin, a-seg.Vaddr+seg.Off)
		if l.Mode != ModeProcess {
			t.Fatalf("mode %v, want process", l.Mode)
		}
		if l.Status == Resolved {
			named++
		}
		if !framesEqual(l.Frames, want[i]) && len(want[i]) > 0 && want[i][0].File != "crtstuff.c" {
			misses++
			t.Logf("%#x: %s", a, framesDiff(l.Frames, want[i]))
		}
	}
	t.Logf("%d of %d addresses named, %d misses", named, len(addrs), misses)
	if named < len(addrs)/2 || misses > len(addrs)/1000 {
		t.Errorf("%d of %d named, %d misses", named, len(addrs), misses)
	}
}

// TestDeletedBinaryStillNamed deletes a running binary: its frames are
// still named, through /proc/PID/map_files.
func TestDeletedBinaryStillNamed(t *testing.T) {
	testenv.RequireRoot(t) // map_files of another process
	var src string
	for _, w := range symtest.DWARFWorkloads(t, workloadDir) {
		if w.Name == "c-dwarf5" {
			src = w.Path
		}
	}
	bin := filepath.Join(t.TempDir(), "doomed")
	run(t, "", "cp", src, bin)
	cmd := exec.Command(bin, "spin")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	m := waitExecMapping(t, cmd.Process.Pid, bin)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	// Read the mappings again: the kernel now marks the file deleted.
	m = waitExecMapping(t, cmd.Process.Pid, bin)
	if !m.Deleted {
		t.Fatalf("mapping %+v not marked deleted", m)
	}
	checkNamedThroughMapping(t, cmd.Process.Pid, m, src)
}

// TestOtherMountNamespaceNamed runs a binary bind-mounted, in a private
// mount namespace, at a path that does not exist in ours: its frames are
// still named.
func TestOtherMountNamespaceNamed(t *testing.T) {
	testenv.RequireRoot(t)
	requireTools(t, "unshare", "mount")
	var src string
	for _, w := range symtest.DWARFWorkloads(t, workloadDir) {
		if w.Name == "c-dwarf5" {
			src = w.Path
		}
	}
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "copy")
	run(t, "", "cp", src, copyPath)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(mnt, "app")
	script := `mount -t tmpfs none "$1" && touch "$1/app" && mount --bind "$2" "$1/app" && exec "$1/app" spin`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", mnt, copyPath)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	m := waitExecMapping(t, cmd.Process.Pid, inside)
	if _, err := os.Stat(inside); !os.IsNotExist(err) {
		t.Fatalf("%s exists in the test's mount namespace (%v): the test proves nothing", inside, err)
	}
	checkNamedThroughMapping(t, cmd.Process.Pid, m, src)
}
