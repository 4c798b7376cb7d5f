package debugcache

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Build-ids whose entries the tests plant links at.
const (
	idFileLink  = "6a0102030405060708090a0b0c0d0e0f10111213" // NN/REST.debug -> canary
	idDirLink   = "6b0102030405060708090a0b0c0d0e0f10111213" // NN -> directory holding a canary
	idLateFile  = "6c0102030405060708090a0b0c0d0e0f10111213" // planted after Open
	idLateDir   = "6dff02030405060708090a0b0c0d0e0f10111213"
	childEnvVar = "BPFCOL_DEBUGCACHE_CHILD"
)

// plant makes id's entry in dir a link to the canary file, or id's NN
// directory a link to the canary's directory (where the canary sits
// under id's REST.debug name).
func plant(dir, id, canary string, asDir bool) error {
	nn := filepath.Join(dir, ".build-id", id[:2])
	// The links may be planted in any order (a map's): .build-id first.
	if err := os.MkdirAll(filepath.Dir(nn), 0o700); err != nil {
		return err
	}
	if asDir {
		cdir := filepath.Dir(canary)
		if err := os.Link(canary, filepath.Join(cdir, id[2:]+".debug")); err != nil && !os.IsExist(err) {
			return err
		}
		return os.Symlink(cdir, nn)
	}
	if err := os.MkdirAll(nn, 0o700); err != nil {
		return err
	}
	return os.Symlink(canary, filepath.Join(nn, id[2:]+".debug"))
}

// TestCacheChild is the process traced by TestPlantedLinksNeverOpened; it
// does nothing in a normal run.
func TestCacheChild(t *testing.T) {
	args := strings.Split(os.Getenv(childEnvVar), "\n")
	switch args[0] {
	case "cache":
		dir, canary := args[1], args[2]
		c, err := Open(dir, 0)
		if err != nil {
			fmt.Println("open:", err)
			return
		}
		// Links planted while the cache is open, met by Open and Lookup.
		if err := plant(dir, idLateFile, canary, false); err != nil {
			t.Fatal(err)
		}
		if err := plant(dir, idLateDir, canary, true); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{idFileLink, idDirLink, idLateFile, idLateDir} {
			c.index[id] = c.lru.PushFront(&item{id, 1}) // as if indexed before the link appeared
			_, err := c.Open(id)
			_, found := c.Lookup(id)
			fmt.Printf("%s corrupt=%v found=%v\n", id, errors.Is(err, ErrCorrupt), found)
		}
		fmt.Printf("removed=%d\n", c.Corrupt())
	case "follow":
		// The control: a plain open of the link reaches the canary.
		f, err := os.Open(args[1])
		if err == nil {
			f.Close()
		}
		fmt.Println("followed:", err)
	}
}

// traced runs TestCacheChild under strace with the given arguments and
// returns its output and the strace log, in which -y names the file each
// returned descriptor refers to.
func traced(t *testing.T, args ...string) (string, string) {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace (Debian package strace) is needed: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "strace.log")
	cmd := exec.Command(strace, "-f", "-y", "-qq", "-e", "trace=open,openat,openat2,creat", "-o", log,
		self, "-test.run=^TestCacheChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnvVar+"="+strings.Join(args, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("traced child: %v\n%s", err, out)
	}
	trace, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), string(trace)
}

// opened reports the strace lines whose returned descriptor names a file
// whose path starts with prefix.
func opened(trace, prefix string) []string {
	var hits []string
	for _, l := range strings.Split(trace, "\n") {
		if _, ret, ok := strings.Cut(l, ") = "); ok && strings.Contains(ret, "<"+prefix) {
			hits = append(hits, l)
		}
	}
	return hits
}

// TestPlantedLinksNeverOpened: links planted in the cache, to a file or in
// place of an NN directory, before or after the cache is opened, are
// removed and counted, and the canary they point to is never opened, as
// the kernel reports it to strace. A plain open of the same link, traced
// the same way, does show the canary: the check can fail.
func TestPlantedLinksNeverOpened(t *testing.T) {
	canaryDir := t.TempDir()
	canary := filepath.Join(canaryDir, "canary")
	if err := os.WriteFile(canary, []byte("\x7fELF must never be read"), 0o600); err != nil {
		t.Fatal(err)
	}
	canaryPath, err := filepath.EvalSymlinks(canary)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for id, asDir := range map[string]bool{idFileLink: false, idDirLink: true} {
		if err := plant(dir, id, canary, asDir); err != nil {
			t.Fatal(err)
		}
	}

	out, trace := traced(t, "follow", filepath.Join(dir, ".build-id", idFileLink[:2], idFileLink[2:]+".debug"))
	if len(opened(trace, canaryPath)) == 0 {
		t.Fatalf("control: strace did not show the canary opened through the link:\n%s\n%s", out, trace)
	}

	out, trace = traced(t, "cache", dir, canary)
	// The canary and its hard links (the files under the linked NN
	// directories) all live in canaryDir.
	if hits := opened(trace, filepath.Dir(canaryPath)+"/"); len(hits) != 0 {
		t.Errorf("the cache opened the canary:\n%s", strings.Join(hits, "\n"))
	}
	if !strings.Contains(out, "removed=4") {
		t.Errorf("want 4 links removed and counted:\n%s", out)
	}
	for _, id := range []string{idFileLink, idDirLink, idLateFile, idLateDir} {
		if !strings.Contains(out, id+" corrupt=") || strings.Contains(out, id+" corrupt=false found=true") || strings.Contains(out, "found=true") {
			t.Errorf("%s: served from the cache:\n%s", id, out)
		}
		if _, err := os.Lstat(filepath.Join(dir, ".build-id", id[:2])); err == nil {
			if fi, _ := os.Lstat(filepath.Join(dir, ".build-id", id[:2])); fi.Mode()&os.ModeSymlink != 0 {
				t.Errorf("%s: link to the directory left in place", id)
			}
		}
		if _, err := os.Lstat(filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")); !os.IsNotExist(err) {
			t.Errorf("%s: entry left in place: %v", id, err)
		}
	}
	if b, err := os.ReadFile(canary); err != nil || !strings.HasPrefix(string(b), "\x7fELF") {
		t.Errorf("canary changed: %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(canaryDir); len(ents) != 3 { // canary and its two hard links
		t.Errorf("canary directory changed: %v", ents)
	}
}

// TestSymlinkedDirNoWriteOutside: a download into a build-id whose NN
// directory is a link lands inside the cache, never where the link points.
func TestSymlinkedDirNoWriteOutside(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	c, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	id := idFileLink
	if err := os.Symlink(outside, filepath.Join(dir, ".build-id", id[:2])); err != nil {
		t.Fatal(err)
	}
	tmp, err := c.Create(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write([]byte("debug")); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Commit(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("written through the link: %v", ents)
	}
	f, err := c.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Lstat(filepath.Join(dir, ".build-id", id[:2])); err != nil || !fi.IsDir() {
		t.Errorf("NN is not a real directory: %v", err)
	}
	if c.Corrupt() != 1 || c.Len() != 1 || c.Size() != 5 {
		t.Errorf("corrupt %d, len %d, size %d; want 1, 1, 5", c.Corrupt(), c.Len(), c.Size())
	}
}

// TestRootMustBePrivate: a group- or other-writable root, or one owned by
// another user, is refused with an error naming it.
func TestRootMustBePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o770, 0o702} {
		os.Chmod(dir, mode)
		if _, err := Open(dir, 0); err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "not private") {
			t.Errorf("mode %#o: Open = %v, want a refusal naming %s", mode, err, dir)
		}
	}
	os.Chmod(dir, 0o700)
	if os.Geteuid() == 0 {
		os.Chown(dir, 65534, 65534)
		if _, err := Open(dir, 0); err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("foreign owner: Open = %v", err)
		}
		os.Chown(dir, 0, 0)
	}
	c, err := Open(dir, 0)
	if err != nil {
		t.Fatalf("private root refused: %v", err)
	}
	c.Close()
}

// TestForeignAndSpecialEntriesRemoved: a FIFO (which would block a plain
// open), a directory, and a file of another user at a debug file's place
// are removed and counted, not served.
func TestForeignAndSpecialEntriesRemoved(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"aa01", "bb02", "cc03"}
	for i, id := range ids {
		p, _ := c.Path(id)
		os.MkdirAll(filepath.Dir(p), 0o700)
		switch i {
		case 0:
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		case 1:
			os.MkdirAll(filepath.Join(p, "x"), 0o700)
		case 2:
			if os.Geteuid() != 0 {
				continue
			}
			os.WriteFile(p, []byte("debug"), 0o600)
			os.Chown(p, 65534, 65534)
		}
		c.index[id] = c.lru.PushFront(&item{id, 1})
	}
	want := int64(0)
	for i, id := range ids {
		if i == 2 && os.Geteuid() != 0 {
			continue
		}
		want++
		done := make(chan error, 1)
		go func() {
			_, err := c.Open(id)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: Open = %v, want ErrCorrupt", id, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Open blocked", id)
		}
		p, _ := c.Path(id)
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left in place: %v", id, err)
		}
	}
	if c.Corrupt() != want || c.Len() != 0 {
		t.Errorf("corrupt %d, len %d; want %d, 0", c.Corrupt(), c.Len(), want)
	}
}
