package process

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// DupFile returns a new *os.File on f's open file, which its owner may
// close independently.
func DupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating %s: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
