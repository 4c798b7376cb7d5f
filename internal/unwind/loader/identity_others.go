//go:build !linux

package loader

import "errors"

func identity(uint32) (procIdentity, error) {
	return procIdentity{}, errors.New("reading processes needs linux")
}
