//go:build unix

package elfbin

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaxMappedFile bounds the size of a file mapped, and of a section
// decompressed into a file to be mapped.
const MaxMappedFile = 1 << 40

// Map maps f read-only and private. Tables are read from the mapping in
// place: only the pages a read touches come in, and they stay in the page
// cache rather than the Go heap. Reads of it run under GuardFaults. An
// empty or irregular file maps to nil.
func Map(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
	}
	size := fi.Size()
	if size == 0 || !fi.Mode().IsRegular() {
		return nil, nil
	}
	if size < 0 || size > MaxMappedFile || int64(int(size)) != size {
		return nil, fmt.Errorf("mapping %s: %d bytes, more than %d", f.Name(), size, int64(MaxMappedFile))
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
	}
	return data, nil
}

// MapShared maps size bytes of f read-only and shared: pages read before
// f is written there show what is written after, as a private mapping of
// a hole need not.
func MapShared(f *os.File, size int64) ([]byte, error) {
	if size <= 0 || size > MaxMappedFile || int64(int(size)) != size {
		return nil, fmt.Errorf("mapping %s: %d bytes", f.Name(), size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
	}
	return data, nil
}

// Unmap unmaps what Map or MapShared mapped; nil is nothing.
func Unmap(data []byte) error {
	if data == nil {
		return nil
	}
	return syscall.Munmap(data)
}

// DropPages gives the pages of a mapping read so far back to the page
// cache: they stop counting in the process's RSS, and a later read faults
// them in again from the cache.
func DropPages(data []byte) {
	if len(data) > 0 {
		_ = unix.Madvise(data, unix.MADV_DONTNEED)
	}
}
