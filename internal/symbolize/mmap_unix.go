//go:build unix

package symbolize

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// mapFile maps f read-only and private. Symbol tables are read from the
// mapping in place: only the pages a lookup touches are read, and they stay
// in the page cache rather than the Go heap. An empty file maps to nil.
func mapFile(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
	}
	size := fi.Size()
	if size == 0 || !fi.Mode().IsRegular() {
		return nil, nil
	}
	if size < 0 || size > maxMappedFile || int64(int(size)) != size {
		return nil, fmt.Errorf("mapping %s: %d bytes, more than %d", f.Name(), size, int64(maxMappedFile))
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
	}
	return data, nil
}

// mapFileShared maps size bytes of f read-only and shared: pages read
// before f is written there show what is written after, as a private
// mapping of a hole need not.
func mapFileShared(f *os.File, size int64) ([]byte, error) {
	if size <= 0 || size > maxMappedFile || int64(int(size)) != size {
		return nil, fmt.Errorf("mapping %s: %d bytes", f.Name(), size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
	}
	return data, nil
}

func unmapFile(data []byte) error {
	if data == nil {
		return nil
	}
	return syscall.Munmap(data)
}

// dropPages gives the pages of a mapping read so far back to the page
// cache: they stop counting in the process's RSS, and a later read faults
// them in again from the cache.
func dropPages(data []byte) {
	if len(data) > 0 {
		_ = unix.Madvise(data, unix.MADV_DONTNEED)
	}
}

// anonMap returns n bytes of zero pages, which take no memory until
// written.
func anonMap(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
}

func anonUnmap(b []byte) { _ = syscall.Munmap(b) }
