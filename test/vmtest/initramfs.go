package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// initramfs writes an uncompressed cpio archive in the "newc" format the
// kernel unpacks into its root file system. Uncompressed: under emulation
// the kernel would take longer to inflate it than the host to copy it.
type initramfs struct {
	w    *bufio.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

func newInitramfs(w io.Writer) *initramfs {
	return &initramfs{w: bufio.NewWriterSize(w, 1<<20), dirs: map[string]bool{"": true, "/": true}}
}

// mkdirAll adds dir and each of its parents not added yet.
func (a *initramfs) mkdirAll(dir string) {
	dir = path.Clean("/" + dir)
	if a.dirs[dir] {
		return
	}
	a.mkdirAll(path.Dir(dir))
	a.dirs[dir] = true
	a.header(dir, 0o040755, 0)
}

// file adds the host file src at name, with mode's permission bits.
func (a *initramfs) file(name, src string, mode os.FileMode) {
	if a.err != nil {
		return
	}
	f, err := os.Open(src)
	if err != nil {
		a.err = fmt.Errorf("adding %s to the initramfs: %w", src, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		a.err = fmt.Errorf("adding %s to the initramfs: %w", src, err)
		return
	}
	a.reader(name, f, st.Size(), mode)
}

// bytes adds data at name.
func (a *initramfs) bytes(name string, data []byte, mode os.FileMode) {
	a.reader(name, strings.NewReader(string(data)), int64(len(data)), mode)
}

func (a *initramfs) reader(name string, r io.Reader, size int64, mode os.FileMode) {
	a.mkdirAll(path.Dir(path.Clean("/" + name)))
	a.header(name, 0o100000|uint32(mode.Perm()), size)
	if a.err != nil {
		return
	}
	if n, err := io.Copy(a.w, r); err != nil || n != size {
		a.err = fmt.Errorf("adding %s to the initramfs: copied %d of %d bytes: %v", name, n, size, err)
		return
	}
	a.pad(size)
}

// symlink adds name pointing at target.
func (a *initramfs) symlink(name, target string) {
	a.mkdirAll(path.Dir(path.Clean("/" + name)))
	a.header(name, 0o120777, int64(len(target)))
	if a.err == nil {
		_, a.err = a.w.WriteString(target)
		a.pad(int64(len(target)))
	}
}

// charDevice adds the character device node name.
func (a *initramfs) charDevice(name string, major, minor uint32) {
	a.mkdirAll(path.Dir(path.Clean("/" + name)))
	a.entry(name, 0o020600, 0, major, minor)
}

// header writes one entry's header and name; the caller writes its data.
func (a *initramfs) header(name string, mode uint32, size int64) {
	a.entry(name, mode, size, 0, 0)
}

func (a *initramfs) entry(name string, mode uint32, size int64, rdevMajor, rdevMinor uint32) {
	if a.err != nil {
		return
	}
	if size > 0xffffffff {
		a.err = fmt.Errorf("adding %s to the initramfs: %d bytes is too large for cpio", name, size)
		return
	}
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	if name == "" {
		name = "."
	}
	a.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize (with its NUL), check.
	_, err := fmt.Fprintf(a.w, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%s\x00",
		a.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdevMajor, rdevMinor, len(name)+1, 0, name)
	if err != nil {
		a.err = err
		return
	}
	a.pad(int64(110 + len(name) + 1))
}

// pad aligns the archive to 4 bytes after n bytes of header or data.
func (a *initramfs) pad(n int64) {
	if r := n % 4; r != 0 && a.err == nil {
		_, a.err = a.w.Write(make([]byte, 4-r))
	}
}

// close writes the trailer and flushes.
func (a *initramfs) close() error {
	a.header("TRAILER!!!", 0, 0)
	if a.err != nil {
		return a.err
	}
	return a.w.Flush()
}
