package safefs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once openat2 answers ENOSYS; tests set it to exercise
// the per-component fallback.
var noOpenat2 atomic.Bool

// Dir is an open directory beneath which paths are resolved. Safe for
// concurrent use.
type Dir struct {
	f    *os.File
	name string
	kind Kind
}

// OpenPrivate opens the directory at path as bpfcol's own, creating it
// (and its missing parents) with mode 0700 if absent. The directory itself
// must not be a symlink, must be owned by the effective uid and must not be
// writable by group or others; its mode is then narrowed to 0700, since
// debug files reveal source paths.
func OpenPrivate(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("opening %s: %w (it must be a directory, not a link)", path, ErrSymlink)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("checking %s: %w", path, err)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid {
		unix.Close(fd)
		return nil, fmt.Errorf("checking %s: %w: owned by uid %d, not by uid %d that runs bpfcol", path, ErrUnsafeRoot, st.Uid, uid)
	}
	if st.Mode&0o022 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("checking %s: %w: mode %#o lets group or others write", path, ErrUnsafeRoot, st.Mode&0o777)
	}
	if st.Mode&0o777 != 0o700 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("restricting %s to mode 0700: %w", path, err)
		}
	}
	return &Dir{f: os.NewFile(uintptr(fd), path), name: path, kind: Private}, nil
}

// OpenTree opens a directory someone else maintains, such as
// /usr/lib/debug: symlinks beneath it are followed only while they stay
// inside it. Path itself is the operator's choice and may be a link.
func OpenTree(path string) (*Dir, error) { return open(path, Tree) }

// OpenRoot opens a process's root directory, /proc/PID/root: paths beneath
// it resolve as they would for the process and never leave it.
func OpenRoot(path string) (*Dir, error) { return open(path, Root) }

// OpenNoLinks opens a directory someone else maintains, beneath which no
// symlink is followed at all. Path itself is the operator's choice and may
// be a link.
func OpenNoLinks(path string) (*Dir, error) { return open(path, NoLinks) }

func open(path string, kind Kind) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return &Dir{f: os.NewFile(uintptr(fd), path), name: path, kind: kind}, nil
}

// Name returns the path the directory was opened at.
func (d *Dir) Name() string { return d.name }

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// ProcPath returns a path naming the open directory itself (its descriptor
// in /proc/self/fd) while d is open: for calls that take a path, such as
// inotify_add_watch, to reach this very directory and not whatever is at
// its name by then.
func (d *Dir) ProcPath() string { return "/proc/self/fd/" + strconv.Itoa(d.fd()) }

func (d *Dir) fd() int { return int(d.f.Fd()) }

func (d *Dir) resolve() uint64 {
	switch d.kind {
	case Tree:
		return unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
	case Root:
		return unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	}
	return unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
}

// checkRel accepts a relative path without "..", "." or empty components.
func checkRel(rel string) error {
	if rel == "" || filepath.IsAbs(rel) {
		return fmt.Errorf("%q: %w", rel, ErrBadPath)
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("%q: %w", rel, ErrBadPath)
		}
	}
	return nil
}

// openat resolves rel beneath d and opens it with flags.
func (d *Dir) openat(rel string, flags int, mode uint32) (int, error) {
	if err := checkRel(rel); err != nil {
		return -1, err
	}
	flags |= unix.O_CLOEXEC
	if !noOpenat2.Load() {
		// RESOLVE_NO_SYMLINKS covers the last component too (ELOOP);
		// O_NOFOLLOW would instead open a link itself under O_PATH.
		how := unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: d.resolve()}
		for range 8 {
			fd, err := unix.Openat2(d.fd(), rel, &how)
			switch {
			case err == nil:
				return fd, nil
			case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
				// A concurrent rename or mount; the kernel asks to retry.
				continue
			case errors.Is(err, unix.ENOSYS):
				noOpenat2.Store(true)
			default:
				return -1, d.openError(rel, errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV), err)
			}
			break
		}
		if !noOpenat2.Load() {
			return -1, d.openError(rel, false, unix.EAGAIN)
		}
	}
	// No openat2: one component at a time, none of them a link. Stricter
	// than Tree and Root need, never looser.
	parts := strings.Split(rel, "/")
	cur := d.fd()
	for _, p := range parts[:len(parts)-1] {
		next, err := unix.Openat(cur, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		link := err != nil && isLinkAt(cur, p)
		if cur != d.fd() {
			unix.Close(cur)
		}
		if err != nil {
			return -1, d.openError(rel, link, err)
		}
		cur = next
	}
	last := parts[len(parts)-1]
	fd, err := unix.Openat(cur, last, flags|unix.O_NOFOLLOW, mode)
	link := err != nil && isLinkAt(cur, last)
	if err == nil && flags&unix.O_PATH != 0 && isLinkAt(cur, last) {
		// O_PATH|O_NOFOLLOW opens a link itself.
		unix.Close(fd)
		fd, err, link = -1, unix.ELOOP, true
	}
	if cur != d.fd() {
		unix.Close(cur)
	}
	if err != nil {
		return -1, d.openError(rel, link, err)
	}
	return fd, nil
}

// openError describes a failed open of rel; link says a symlink was in
// the way, which callers tell apart with errors.Is(err, ErrSymlink).
func (d *Dir) openError(rel string, link bool, err error) error {
	if link {
		return fmt.Errorf("opening %s beneath %s: %w (%w)", rel, d.name, ErrSymlink, err)
	}
	return fmt.Errorf("opening %s beneath %s: %w", rel, d.name, err)
}

// isLinkAt reports whether name in the directory dirfd is a symlink.
func isLinkAt(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// Open opens the regular file at rel for reading. Anything else (a FIFO
// that would block, a device, a directory) is refused with ErrNotRegular
// and closed without a read.
func (d *Dir) Open(rel string) (*os.File, error) {
	return d.openRegular(rel, unix.O_RDONLY, 0)
}

// OpenFile opens the regular file at rel with flags (os.O_* values) and
// perm for a file it creates.
func (d *Dir) OpenFile(rel string, flags int, perm fs.FileMode) (*os.File, error) {
	return d.openRegular(rel, flags, uint32(perm.Perm()))
}

func (d *Dir) openRegular(rel string, flags int, perm uint32) (*os.File, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	fd, err := d.openat(rel, flags|unix.O_NONBLOCK|unix.O_NOCTTY, perm)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("checking %s beneath %s: %w", rel, d.name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("opening %s beneath %s: %w", rel, d.name, ErrNotRegular)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("opening %s beneath %s: %w", rel, d.name, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.name, rel)), nil
}

// parent opens the directory holding rel and returns rel's last component.
// close releases the directory.
func (d *Dir) parent(rel string) (fd int, base string, close func(), err error) {
	if err := checkRel(rel); err != nil {
		return -1, "", nil, err
	}
	dir, base := filepath.Split(rel)
	if dir == "" {
		return d.fd(), base, func() {}, nil
	}
	pfd, err := d.openat(strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", nil, err
	}
	return pfd, base, func() { unix.Close(pfd) }, nil
}

// Lstat describes the entry at rel without following it if it is a link.
func (d *Dir) Lstat(rel string) (Info, error) {
	pfd, base, done, err := d.parent(rel)
	if err != nil {
		return Info{}, err
	}
	defer done()
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Info{}, fmt.Errorf("checking %s beneath %s: %w", rel, d.name, err)
	}
	return infoOf(&st), nil
}

func infoOf(st *unix.Stat_t) Info {
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	return Info{Mode: mode, UID: st.Uid, Size: st.Size, ModTime: time.Unix(st.Mtim.Unix())}
}

// Mkdir creates the directory rel with perm; an existing directory is
// fine, an existing link or file is not.
func (d *Dir) Mkdir(rel string, perm fs.FileMode) error {
	pfd, base, done, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer done()
	err = unix.Mkdirat(pfd, base, uint32(perm.Perm()))
	if errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("checking %s beneath %s: %w", rel, d.name, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return nil
		case unix.S_IFLNK:
			return fmt.Errorf("creating %s beneath %s: %w", rel, d.name, ErrSymlink)
		}
		return fmt.Errorf("creating %s beneath %s: %w", rel, d.name, unix.ENOTDIR)
	}
	if err != nil {
		return fmt.Errorf("creating %s beneath %s: %w", rel, d.name, err)
	}
	return nil
}

// CreateTemp creates a new file with mode 0600 in the directory dirRel
// ("." for d itself), its name pattern followed by random characters, and
// returns it with its path relative to d.
func (d *Dir) CreateTemp(dirRel, pattern string) (*os.File, string, error) {
	prefix := dirRel + "/" + pattern
	if dirRel == "." {
		prefix = pattern
	}
	var b [8]byte
	for range 100 {
		rand.Read(b[:])
		rel := prefix + hex.EncodeToString(b[:])
		fd, err := d.openat(rel, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return os.NewFile(uintptr(fd), filepath.Join(d.name, rel)), rel, nil
	}
	return nil, "", fmt.Errorf("creating a temporary file in %s beneath %s: too many collisions", dirRel, d.name)
}

// Rename moves oldRel to newRel, both beneath d, replacing newRel.
func (d *Dir) Rename(oldRel, newRel string) error {
	ofd, obase, odone, err := d.parent(oldRel)
	if err != nil {
		return err
	}
	defer odone()
	nfd, nbase, ndone, err := d.parent(newRel)
	if err != nil {
		return err
	}
	defer ndone()
	if err := unix.Renameat(ofd, obase, nfd, nbase); err != nil {
		return fmt.Errorf("renaming %s to %s beneath %s: %w", oldRel, newRel, d.name, err)
	}
	return nil
}

// Remove removes the entry at rel, never what a link at rel points to. A
// directory is removed with its contents.
func (d *Dir) Remove(rel string) error {
	pfd, base, done, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer done()
	return removeAt(pfd, base, 0, d.name, rel)
}

// maxRemoveDepth bounds the recursion of a directory planted in the cache.
const maxRemoveDepth = 16

func removeAt(pfd int, base string, depth int, root, rel string) error {
	err := unix.Unlinkat(pfd, base, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		if depth >= maxRemoveDepth {
			return fmt.Errorf("removing %s beneath %s: nested too deep", rel, root)
		}
		// A directory: empty it through its own descriptor first.
		fd, oerr := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if oerr != nil {
			return fmt.Errorf("removing %s beneath %s: %w", rel, root, err)
		}
		f := os.NewFile(uintptr(fd), base)
		names, _ := f.Readdirnames(-1)
		for _, n := range names {
			if err := removeAt(fd, n, depth+1, root, rel+"/"+n); err != nil {
				f.Close()
				return err
			}
		}
		f.Close()
		err = unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing %s beneath %s: %w", rel, root, err)
	}
	return nil
}

// ReadDir returns the names in the directory rel ("." for d itself).
func (d *Dir) ReadDir(rel string) ([]string, error) {
	var fd int
	var err error
	if rel == "." {
		fd, err = unix.Openat(d.fd(), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		fd, err = d.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s beneath %s: %w", rel, d.name, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("listing %s beneath %s: %w", rel, d.name, err)
	}
	return names, nil
}

// ReadNames returns up to n names in d itself, and whether it holds more:
// a bounded listing of a directory that may be huge.
func (d *Dir) ReadNames(n int) (names []string, more bool, err error) {
	fd, err := unix.Openat(d.fd(), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, fmt.Errorf("listing %s: %w", d.name, err)
	}
	f := os.NewFile(uintptr(fd), d.name)
	defer f.Close()
	names, err = f.Readdirnames(n + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("listing %s: %w", d.name, err)
	}
	if len(names) > n {
		return names[:n], true, nil
	}
	return names, false, nil
}

// Touch sets f's access and modification times to now.
func Touch(f *os.File) error {
	now := unix.NsecToTimeval(time.Now().UnixNano())
	return unix.Futimes(int(f.Fd()), []unix.Timeval{now, now})
}

// Owner returns the uid owning f and whether f is a regular file.
func Owner(f *os.File) (uid uint32, regular bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, false, err
	}
	return st.Uid, st.Mode&unix.S_IFMT == unix.S_IFREG, nil
}
