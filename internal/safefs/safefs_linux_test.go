package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// bothResolvers runs f with openat2 and with the per-component O_NOFOLLOW
// fallback used where openat2 is missing.
func bothResolvers(t *testing.T, f func(t *testing.T, fallback bool)) {
	for _, fallback := range []bool{false, true} {
		name := "openat2"
		if fallback {
			name = "nofollow-fallback"
		}
		t.Run(name, func(t *testing.T) {
			noOpenat2.Store(fallback)
			defer noOpenat2.Store(false)
			f(t, fallback)
		})
	}
}

func readAll(t *testing.T, d *Dir, rel string) (string, error) {
	t.Helper()
	f, err := d.Open(rel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := f.Read(buf)
	return string(buf[:n]), nil
}

func TestPrivateFollowsNoLink(t *testing.T) {
	bothResolvers(t, func(t *testing.T, _ bool) {
		outside := t.TempDir()
		secret := filepath.Join(outside, "secret")
		write(t, secret, "secret")
		root := filepath.Join(t.TempDir(), "cache")
		d, err := OpenPrivate(root)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		write(t, filepath.Join(root, "a", "ok"), "ok")
		symlink(t, secret, filepath.Join(root, "a", "file-link"))
		symlink(t, "ok", filepath.Join(root, "a", "inner-link"))
		symlink(t, outside, filepath.Join(root, "dir-link"))
		if got, err := readAll(t, d, "a/ok"); err != nil || got != "ok" {
			t.Errorf("a/ok: %q, %v", got, err)
		}
		for _, rel := range []string{"a/file-link", "a/inner-link", "dir-link/secret"} {
			if _, err := d.Open(rel); !errors.Is(err, ErrSymlink) {
				t.Errorf("Open(%s) = %v, want ErrSymlink", rel, err)
			}
		}
		for _, rel := range []string{"../x", "/etc/passwd", "a/../a/ok", ""} {
			if _, err := d.Open(rel); !errors.Is(err, ErrBadPath) {
				t.Errorf("Open(%q) = %v, want ErrBadPath", rel, err)
			}
		}
		// Writes: no directory made, file created or renamed through a link.
		if err := d.Mkdir("dir-link", 0o700); !errors.Is(err, ErrSymlink) {
			t.Errorf("Mkdir over a link: %v", err)
		}
		if _, _, err := d.CreateTemp("dir-link", ".tmp-"); !errors.Is(err, ErrSymlink) {
			t.Errorf("CreateTemp through a link: %v", err)
		}
		if _, err := d.OpenFile("dir-link/new", os.O_CREATE|os.O_WRONLY, 0o600); !errors.Is(err, ErrSymlink) {
			t.Errorf("OpenFile through a link: %v", err)
		}
		f, tmp, err := d.CreateTemp("a", ".tmp-")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := d.Rename(tmp, "dir-link/moved"); !errors.Is(err, ErrSymlink) {
			t.Errorf("Rename through a link: %v", err)
		}
		// Remove takes the link away, not what it points to.
		for _, rel := range []string{"a/file-link", "dir-link"} {
			if err := d.Remove(rel); err != nil {
				t.Errorf("Remove(%s): %v", rel, err)
			}
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 || ents[0].Name() != "secret" {
			t.Errorf("outside directory changed: %v", ents)
		}
		if _, err := os.Lstat(filepath.Join(root, "dir-link")); !os.IsNotExist(err) {
			t.Errorf("link not removed: %v", err)
		}
		// A FIFO is refused without blocking.
		if err := mkfifo(filepath.Join(root, "a", "fifo")); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Open("a/fifo"); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Open(fifo) = %v, want ErrNotRegular", err)
		}
	})
}

func TestPrivateRootChecked(t *testing.T) {
	base := t.TempDir()
	loose := filepath.Join(base, "loose")
	if err := os.Mkdir(loose, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(loose, 0o770)
	if _, err := OpenPrivate(loose); !errors.Is(err, ErrUnsafeRoot) || !strings.Contains(err.Error(), loose) {
		t.Errorf("group-writable root: %v, want ErrUnsafeRoot naming %s", err, loose)
	}
	os.Chmod(loose, 0o757)
	if _, err := OpenPrivate(loose); !errors.Is(err, ErrUnsafeRoot) {
		t.Errorf("other-writable root: %v", err)
	}
	link := filepath.Join(base, "link")
	symlink(t, t.TempDir(), link)
	if _, err := OpenPrivate(link); !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), link) {
		t.Errorf("symlinked root: %v", err)
	}
	if os.Geteuid() == 0 {
		foreign := filepath.Join(base, "foreign")
		os.Mkdir(foreign, 0o700)
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenPrivate(foreign); !errors.Is(err, ErrUnsafeRoot) || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("root owned by another user: %v", err)
		}
	}
	fresh := filepath.Join(base, "new", "cache")
	d, err := OpenPrivate(fresh)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created root mode %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	os.Chmod(fresh, 0o750)
	d, err = OpenPrivate(fresh)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o700 {
		t.Errorf("readable-by-group root left at %v, want 0700", fi.Mode().Perm())
	}
}

func TestTreeLinksStayInside(t *testing.T) {
	bothResolvers(t, func(t *testing.T, fallback bool) {
		outside := t.TempDir()
		write(t, filepath.Join(outside, "secret.debug"), "secret")
		tree := t.TempDir()
		write(t, filepath.Join(tree, "usr", "bin", "tool.debug"), "inside")
		symlink(t, "../../usr/bin/tool.debug", filepath.Join(tree, ".build-id", "ab", "cd.debug"))
		symlink(t, filepath.Join(outside, "secret.debug"), filepath.Join(tree, ".build-id", "ab", "abs.debug"))
		symlink(t, "../../../../../../../../"+outside+"/secret.debug", filepath.Join(tree, ".build-id", "ab", "up.debug"))
		d, err := OpenTree(tree)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		got, err := readAll(t, d, ".build-id/ab/cd.debug")
		if fallback {
			// Without openat2 no link is followed: safe, if stricter.
			if !errors.Is(err, ErrSymlink) {
				t.Errorf("inner link without openat2: %q, %v", got, err)
			}
		} else if err != nil || got != "inside" {
			t.Errorf("inner link: %q, %v; want the file inside the tree", got, err)
		}
		for _, rel := range []string{".build-id/ab/abs.debug", ".build-id/ab/up.debug"} {
			if got, err := readAll(t, d, rel); !errors.Is(err, ErrSymlink) {
				t.Errorf("escaping link %s: %q, %v; want ErrSymlink", rel, got, err)
			}
		}
	})
}

func TestRootResolvesInsideRoot(t *testing.T) {
	name := "safefs-test-" + filepath.Base(t.TempDir())
	root := t.TempDir()
	write(t, filepath.Join(root, "etc", name), "container")
	symlink(t, "/etc/"+name, filepath.Join(root, "usr", "link"))
	d, err := OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got, err := readAll(t, d, "usr/link"); err != nil || got != "container" {
		t.Errorf("absolute link in a root: %q, %v; want the root's own file", got, err)
	}
}
