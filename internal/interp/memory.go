package interp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
)

// MaxRead bounds one read of another process's memory: whatever a
// process's memory claims (a string's length, a table's size), no read
// allocates more.
const MaxRead = 1 << 20

// ErrTooLarge is returned for a read beyond MaxRead.
var ErrTooLarge = errors.New("remote read larger than the bound")

// Memory reads the memory of one process. Its reads fail, and are counted
// in Failures, when the process is gone or the range is not mapped.
type Memory struct {
	PID int
	// Failures, when set, counts the reads that failed.
	Failures *atomic.Int64
}

// Read fills buf from address addr of the process: all of it, or an
// error.
func (m Memory) Read(addr uint64, buf []byte) error {
	if len(buf) > MaxRead {
		m.failed()
		return fmt.Errorf("reading %d bytes at %#x of pid %d: %w", len(buf), addr, m.PID, ErrTooLarge)
	}
	if len(buf) == 0 {
		return nil
	}
	if err := readRemote(m.PID, addr, buf); err != nil {
		m.failed()
		return fmt.Errorf("reading %d bytes at %#x of pid %d: %w", len(buf), addr, m.PID, err)
	}
	return nil
}

// Uint64 reads the 8 bytes at addr.
func (m Memory) Uint64(addr uint64) (uint64, error) {
	var b [8]byte
	if err := m.Read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (m Memory) failed() {
	if m.Failures != nil {
		m.Failures.Add(1)
	}
}
