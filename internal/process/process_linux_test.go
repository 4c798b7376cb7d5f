package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/safefs"
	"github.com/bpfcol/bpfcol/internal/testenv"

	"golang.org/x/sys/unix"
)

func TestParseMappings(t *testing.T) {
	text := "55d0c0a00000-55d0c0a21000 r-xp 00001000 fd:01 1234567                    /usr/bin/my prog (deleted)\n" +
		"7ffd6c1f2000-7ffd6c1f4000 r-xp 00000000 00:00 0                          [vdso]\n" +
		"7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n"
	maps, err := ParseMappings(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 3 {
		t.Fatalf("got %d mappings", len(maps))
	}
	m := maps[0]
	if m.Start != 0x55d0c0a00000 || m.End != 0x55d0c0a21000 || m.Offset != 0x1000 || m.Inode != 1234567 {
		t.Errorf("bad numbers: %+v", m)
	}
	if m.Path != "/usr/bin/my prog" || !m.Deleted || !m.Executable() || !m.File() {
		t.Errorf("bad path or flags: %+v", m)
	}
	if m.Dev != unix.Mkdev(0xfd, 0x01) {
		t.Errorf("dev %x, want %x", m.Dev, unix.Mkdev(0xfd, 1))
	}
	if maps[1].File() || maps[1].Path != "[vdso]" || maps[2].Path != "" {
		t.Errorf("pseudo mappings: %+v %+v", maps[1], maps[2])
	}
	if _, err := ParseMappings(strings.NewReader("zz-1 r-xp 0 0:0 0\n")); err == nil {
		t.Error("want an error for a bad range")
	}
}

// TestOwnMappingsMatchStat checks device and inode numbers against stat(2)
// of the test binary itself.
func TestOwnMappingsMatchStat(t *testing.T) {
	maps, err := ReadMappings(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := ExecutablePath(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
	found := false
	for i := range maps {
		m := &maps[i]
		if m.Path != exe || !m.Executable() {
			continue
		}
		found = true
		if m.Dev != st.Dev || m.Inode != st.Ino {
			t.Fatalf("mapping dev/inode %x/%d, stat says %x/%d", m.Dev, m.Inode, st.Dev, st.Ino)
		}
		f, err := OpenMapping(os.Getpid(), m)
		if err != nil {
			t.Fatal(err)
		}
		var fst unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if fst.Ino != st.Ino {
			t.Fatalf("opened inode %d, want %d", fst.Ino, st.Ino)
		}
		id, err := StatMapping(os.Getpid(), m)
		if err != nil || id.FileKey != m.Key() || id.Size != st.Size || !id.ModTime.Equal(time.Unix(st.Mtim.Unix())) {
			t.Fatalf("StatMapping = %+v, %v; stat says size %d, mtime %v", id, err, st.Size, time.Unix(st.Mtim.Unix()))
		}
		fi, err := os.Stat(MappedFilePath(os.Getpid(), m))
		if got, ok := FileIDOf(fi); err != nil || !ok || !got.Same(id) {
			t.Fatalf("MappedFilePath names %+v (%v), want %+v", got, err, id)
		}
		stale := *m
		stale.Inode++
		if _, err := StatMapping(os.Getpid(), &stale); err == nil {
			t.Fatal("StatMapping accepted a file that is not the mapped one")
		}
	}
	if !found {
		t.Fatalf("no executable mapping of %s", exe)
	}
}

func TestContainerID(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, text := range []string{
		"0::/system.slice/docker-" + id + ".scope\n",
		"0::/kubepods/burstable/pod1234/cri-containerd-" + id + ".scope\n",
		"12:memory:/docker/" + id + "\n",
		"0::/kubepods.slice/kubepods-pod1.slice/crio-" + id + ".scope/container\n",
	} {
		got, err := parseContainerID(strings.NewReader(text))
		if err != nil || got != id {
			t.Errorf("%q: got %q, %v", text, got, err)
		}
	}
	got, err := parseContainerID(strings.NewReader("0::/user.slice/user-0.slice/session-1.scope\n"))
	if err != nil || got != "" {
		t.Errorf("host process: got %q, %v", got, err)
	}
	if _, err := ContainerID(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

// TestOpenMappingOfDeletedFile opens a mapping whose file is gone.
func TestOpenMappingOfDeletedFile(t *testing.T) {
	testenv.RequireRoot(t) // map_files of another process
	dir := t.TempDir()
	bin := dir + "/sleeper"
	data, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	var target *Mapping
	for range 100 {
		maps, err := ReadMappings(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		for i := range maps {
			if maps[i].Deleted && maps[i].Path == bin && maps[i].Executable() {
				target = &maps[i]
			}
		}
		if target != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if target == nil {
		t.Fatal("no deleted executable mapping found")
	}
	f, err := OpenMapping(cmd.Process.Pid, target)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, 4)
	if _, err := f.ReadAt(got, 0); err != nil || string(got) != "\x7fELF" {
		t.Fatalf("read %q, %v", got, err)
	}
}

func TestInfoCache(t *testing.T) {
	reads := map[int]int{}
	c := NewInfoCache(3)
	c.read = func(pid int) (Info, error) {
		reads[pid]++
		if pid < 0 {
			return Info{}, os.ErrNotExist
		}
		return Info{ExePath: "/bin/p" + string(rune('0'+pid)), ExeName: "p" + string(rune('0'+pid))}, nil
	}
	for _, pid := range []int{1, 2, 3, 1, 4, 5} {
		if got := c.Lookup(pid); got.ExeName != "p"+string(rune('0'+pid)) {
			t.Fatalf("Lookup(%d) = %+v", pid, got)
		}
	}
	// 1 was used again before 4 and 5 came: 2 and 3 went.
	if st := c.Stats(); st.Len != 3 || st.Evictions != 2 {
		t.Fatalf("stats %+v: want 3 entries after 2 evictions", st)
	}
	c.Lookup(1)
	c.Lookup(2)
	if reads[1] != 1 || reads[2] != 2 {
		t.Errorf("reads %v: want pid 1 served from the cache and evicted pid 2 read again", reads)
	}
	if got := c.Lookup(-1); got != (Info{}) {
		t.Errorf("a gone process read as %+v", got)
	}
	c.Lookup(-1)
	if reads[-1] != 2 {
		t.Errorf("a gone process was cached: %d reads", reads[-1])
	}
	c.Forget(1)
	c.Lookup(1)
	if reads[1] != 2 {
		t.Errorf("Forget kept pid 1: %d reads", reads[1])
	}
}

func TestReadInfoSelf(t *testing.T) {
	info, err := ReadInfo(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if info.ExePath != exe || info.ExeName != filepath.Base(exe) {
		t.Errorf("ReadInfo = %+v, want executable %s", info, exe)
	}
}

// TestRunning tells a live process from a zombie and from a reaped one.
func TestRunning(t *testing.T) {
	if !Running(os.Getpid()) {
		t.Fatal("this process is not running")
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Not reaped yet: a zombie once it exited.
	deadline := time.Now().Add(5 * time.Second)
	for Running(pid) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if Running(pid) {
		t.Fatal("an exited, unreaped child still counts as running")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Fatalf("the zombie should still be in /proc: %v", err)
	}
	_ = cmd.Wait()
	if Running(pid) {
		t.Fatal("a reaped child counts as running")
	}
}

// TestOpenInRootRefusesFIFO plants a FIFO where a file is looked for: the
// open must fail at once as not a regular file, not wait for a writer.
func TestOpenInRootRefusesFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "planted.debug")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{os.Getpid(), 0} {
		for name, open := range map[string]func(int, string) (*os.File, error){"OpenInRoot": OpenInRoot, "OpenInRootNoSymlinks": OpenInRootNoSymlinks} {
			f, err := open(pid, fifo)
			if err == nil {
				f.Close()
				t.Fatalf("%s(%d, FIFO) opened it", name, pid)
			}
			if !errors.Is(err, safefs.ErrNotRegular) {
				t.Errorf("%s(%d, FIFO): %v, want %v", name, pid, err, safefs.ErrNotRegular)
			}
		}
	}
}

// TestOpenInRootNoSymlinks plants a symlink to a file in a world-writable
// directory's stead: OpenInRoot follows it inside the root, the strict
// variant refuses it (as a last component and on the way), in our root
// and in /proc/PID/root alike, yet opens the plain path.
func TestOpenInRootNoSymlinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "secret")
	if err := os.WriteFile(target, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "perf-1.map")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	linkedDir := filepath.Join(dir, "linked")
	if err := os.Symlink(dir, linkedDir); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{os.Getpid(), 0} {
		f, err := OpenInRoot(pid, link)
		if err != nil {
			t.Fatalf("OpenInRoot(%d, symlink): %v", pid, err)
		}
		f.Close()
		for _, path := range []string{link, filepath.Join(linkedDir, "secret")} {
			f, err := OpenInRootNoSymlinks(pid, path)
			if err == nil {
				f.Close()
				t.Fatalf("OpenInRootNoSymlinks(%d, %s) followed a symlink", pid, path)
			}
			if !errors.Is(err, unix.ELOOP) {
				t.Errorf("OpenInRootNoSymlinks(%d, %s): %v, want ELOOP", pid, path, err)
			}
		}
		f, err = OpenInRootNoSymlinks(pid, target)
		if err != nil {
			t.Fatalf("OpenInRootNoSymlinks(%d, %s): %v", pid, target, err)
		}
		f.Close()
	}
}

// TestProcReadersSelf reads this process's threads, working directory,
// start time and pid in its namespace, and names its executable through
// its root, each against what the process knows of itself.
func TestProcReadersSelf(t *testing.T) {
	pid := os.Getpid()
	tids, err := ThreadIDs(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tids, pid) {
		t.Errorf("threads %v lack the main thread %d", tids, pid)
	}
	cwd, err := WorkingDir(pid)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := os.Getwd(); cwd != want {
		t.Errorf("working directory %q, want %q", cwd, want)
	}
	start, err := StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strconv.ParseUint(start, 10, 64); err != nil {
		t.Errorf("start time %q is no number of ticks: %v", start, err)
	}
	if again, _ := StartTime(pid); again != start {
		t.Errorf("start time read %q, then %q", start, again)
	}
	if nspid, err := NamespacePID(pid); err != nil || nspid != pid {
		t.Errorf("pid in its namespace %d (%v), want %d", nspid, err, pid)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.Stat(PathInRoot(pid, exe))
	if err != nil || !os.SameFile(got, want) {
		t.Errorf("%s is not %s: %v", PathInRoot(pid, exe), exe, err)
	}
}

// TestProcReadersOfAGonePid checks that the readers fail for the pid of a
// reaped process.
func TestProcReadersOfAGonePid(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if _, err := ThreadIDs(pid); err == nil {
		t.Error("ThreadIDs of a reaped process")
	}
	if _, err := WorkingDir(pid); err == nil {
		t.Error("WorkingDir of a reaped process")
	}
	if _, err := StartTime(pid); err == nil {
		t.Error("StartTime of a reaped process")
	}
	if _, err := NamespacePID(pid); err == nil {
		t.Error("NamespacePID of a reaped process")
	}
}
