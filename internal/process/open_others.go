//go:build !linux

package process

import (
	"errors"
	"os"
)

// OpenMapping needs /proc, which only linux has.
func OpenMapping(int, *Mapping) (*os.File, error) {
	return nil, errors.New("opening a process mapping needs linux")
}
