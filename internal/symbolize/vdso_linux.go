package symbolize

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/process"
)

// VDSOPath is the pseudo-path /proc/PID/maps gives the kernel's vDSO.
const VDSOPath = process.VDSOPath

// vdsoTableBytes bounds the parsed tables of the vDSO image.
const vdsoTableBytes = 1 << 20

var vdso struct {
	once sync.Once
	bin  *Binary
	size uint64
	err  error
}

// VDSO returns the kernel's vDSO image, as mapped into bpfcol itself: every
// 64-bit process on the host maps the same image, so it names their
// [vdso] frames (clock_gettime, gettimeofday, ...) from its .dynsym. size
// is the image's size, which a mapping of another image (a 32-bit
// process's) does not have. The Binary is opened once and held for the
// life of the process.
func VDSO() (bin *Binary, size uint64, err error) {
	vdso.once.Do(func() { vdso.bin, vdso.size, vdso.err = openVDSO() })
	return vdso.bin, vdso.size, vdso.err
}

func openVDSO() (*Binary, uint64, error) {
	image, err := process.VDSOImage()
	if err != nil {
		return nil, 0, err
	}
	// A Binary reads a file: the image goes into a memfd.
	fd, err := unix.MemfdCreate("bpfcol-vdso", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the vDSO: creating a memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), VDSOPath)
	if _, err := f.Write(image); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("reading the vDSO: %w", err)
	}
	// Its .dynsym is a few dozen symbols: a cache of its own, never
	// crowded out by the binaries the receiver names.
	bin, err := OpenBinary(f, NewTables(vdsoTableBytes))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the vDSO: %w", err)
	}
	return bin, uint64(len(image)), nil
}
