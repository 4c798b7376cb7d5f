//go:build !linux

package perfmap

import (
	"errors"
	"io"
)

func openPerfMap(int) (io.ReadSeekCloser, string, error) {
	return nil, "", errors.New("perf maps are read on linux only")
}
