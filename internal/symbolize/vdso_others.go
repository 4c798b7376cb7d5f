//go:build !linux

package symbolize

import (
	"errors"

	"github.com/bpfcol/bpfcol/internal/process"
)

// VDSOPath is the pseudo-path /proc/PID/maps gives the kernel's vDSO.
const VDSOPath = process.VDSOPath

// VDSO returns the kernel's vDSO image; only on Linux.
func VDSO() (bin *Binary, size uint64, err error) {
	return nil, 0, errors.ErrUnsupported
}
