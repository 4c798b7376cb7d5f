//go:build !linux

package process

import "errors"

// VDSOImage returns the kernel's vDSO image; only on Linux.
func VDSOImage() ([]byte, error) { return nil, errors.ErrUnsupported }
