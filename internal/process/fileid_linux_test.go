package process

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

func statID(t *testing.T, p string) FileID {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	id, ok := FileIDOf(fi)
	if !ok || id.Ino == 0 {
		t.Fatalf("FileIDOf(%s) = %+v, %v", p, id, ok)
	}
	return id
}

// TestFileIDSameFileManyPaths names one file by its path, a hard link, a
// symlink, and an open descriptor: all four are one FileID.
func TestFileIDSameFileManyPaths(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bin")
	if err := os.WriteFile(p, []byte("some code"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p, filepath.Join(dir, "hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("bin", filepath.Join(dir, "symlink")); err != nil {
		t.Fatal(err)
	}
	want := statID(t, p)
	if want.Size != 9 {
		t.Fatalf("size %d, want 9", want.Size)
	}
	for _, other := range []string{"hardlink", "symlink"} {
		if got := statID(t, filepath.Join(dir, other)); !got.Same(want) || got != want {
			t.Errorf("%s: %+v, want %+v", other, got, want)
		}
	}
	f, err := os.Open(filepath.Join(dir, "hardlink"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := StatFile(f)
	if err != nil || !got.Same(want) {
		t.Errorf("StatFile = %+v, %v; want %+v", got, err, want)
	}
	other := filepath.Join(dir, "copy")
	if err := os.WriteFile(other, []byte("some code"), 0o755); err != nil {
		t.Fatal(err)
	}
	if statID(t, other).Same(want) {
		t.Error("a copy with the same content is the same file")
	}
}

// TestFileIDReplacedFile rewrites a file in place (same inode) and replaces
// it by rename (new inode): both are another FileID.
func TestFileIDReplacedFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bin")
	if err := os.WriteFile(p, []byte("stripped"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := statID(t, p)

	// Same size, only the mtime tells.
	if err := os.WriteFile(p, []byte("symbols!"), 0o755); err != nil {
		t.Fatal(err)
	}
	later := before.ModTime.Add(time.Second)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	inPlace := statID(t, p)
	if inPlace.FileKey != before.FileKey {
		t.Fatalf("in-place write changed the inode: %+v -> %+v", before, inPlace)
	}
	if inPlace.Same(before) {
		t.Errorf("in-place rewrite with a new mtime is the same file: %+v", inPlace)
	}

	// Same mtime, only the size tells.
	if err := os.WriteFile(p, []byte("now with symbols"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, before.ModTime, before.ModTime); err != nil {
		t.Fatal(err)
	}
	if grown := statID(t, p); grown.Same(before) || !grown.ModTime.Equal(before.ModTime) {
		t.Errorf("in-place rewrite with another size: %+v, before %+v", grown, before)
	}

	tmp := filepath.Join(dir, "bin.new")
	if err := os.WriteFile(tmp, []byte("stripped"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, before.ModTime, before.ModTime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	renamed := statID(t, p)
	if renamed.FileKey == before.FileKey || renamed.Same(before) {
		t.Errorf("file replaced by rename kept its identity: %+v, before %+v", renamed, before)
	}
}

// TestOpenInRootResolves opens through /proc/self/root: a plain path, an
// absolute symlink and a ".." above the root all reach the file.
func TestOpenInRootResolves(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "target")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p, filepath.Join(dir, "abs")); err != nil {
		t.Fatal(err)
	}
	want := statID(t, p)
	for _, path := range []string{p, filepath.Join(dir, "abs"), "/../../" + p} {
		f, err := OpenInRoot(os.Getpid(), path)
		if err != nil {
			t.Fatalf("OpenInRoot(%s): %v", path, err)
		}
		got, err := StatFile(f)
		f.Close()
		if err != nil || !got.Same(want) {
			t.Errorf("OpenInRoot(%s) opened %+v, %v; want %+v", path, got, err, want)
		}
	}
	if _, err := OpenInRoot(os.Getpid(), filepath.Join(dir, "missing")); err == nil {
		t.Error("OpenInRoot opened a missing file")
	}
}

// TestOpenInRootConfined runs a child chrooted into a directory: paths,
// ".." and absolute symlinks all resolve inside the child's root, so a
// symlink naming a file of ours does not reach it.
func TestOpenInRootConfined(t *testing.T) {
	if os.Getenv("BPFCOL_PROCESS_CHROOT_CHILD") != "" {
		return // this is the child: TestChrootChildBlocks does its part
	}
	testenv.RequireRoot(t) // chroot
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "child"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "inside"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/inside", filepath.Join(root, "abs")); err != nil {
		t.Fatal(err)
	}
	// The child blocks reading its stdin, inside its root.
	cmd := exec.Command("/child", "-test.run=^TestChrootChildBlocks$")
	cmd.Env = []string{"BPFCOL_PROCESS_CHROOT_CHILD=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	pid := cmd.Process.Pid

	read := func(path string) (string, error) {
		f, err := OpenInRoot(pid, path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), err
	}
	for _, path := range []string{"/inside", "/abs", "/../../inside"} {
		if got, err := read(path); err != nil || got != "inside" {
			t.Errorf("OpenInRoot(%s) = %q, %v; want the file inside the child's root", path, got, err)
		}
	}
	if got, err := read("/escape"); err == nil {
		t.Errorf("OpenInRoot followed a symlink out of the child's root: read %q", got)
	}
	if got, err := read(outside); err == nil {
		t.Errorf("OpenInRoot opened our %s in the child's root: read %q", outside, got)
	}
}

// TestChrootChildBlocks is the chrooted child of TestOpenInRootConfined: it
// waits for its stdin to close.
func TestChrootChildBlocks(t *testing.T) {
	if os.Getenv("BPFCOL_PROCESS_CHROOT_CHILD") == "" {
		return // only meaningful as the child
	}
	io.Copy(io.Discard, os.Stdin)
}
