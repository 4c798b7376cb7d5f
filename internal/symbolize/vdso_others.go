//go:build !linux

package symbolize

import "errors"

// VDSOPath is the pseudo-path /proc/PID/maps gives the kernel's vDSO.
const VDSOPath = "[vdso]"

// VDSO returns the kernel's vDSO image; only on Linux.
func VDSO() (bin *Binary, size uint64, err error) {
	return nil, 0, errors.ErrUnsupported
}
