// Package ringrec reads fixed-size records from a BPF ringbuf into their
// bpf2go-generated Go type, the one way bpfcol's BPF packages (profiler,
// scopeprobe, procwatch) take records from the kernel. It also holds the
// helpers those records share: ringbuf sizing and the comm string.
package ringrec

import (
	"math/bits"
	"os"
	"unsafe"
)

// ErrClosed is returned by Read once the Reader is closed.
var ErrClosed = os.ErrClosed

// ErrDeadline is returned by Read when the deadline set by SetDeadline
// passed and no record was left to read.
var ErrDeadline = os.ErrDeadlineExceeded

// MaxSize bounds every ringbuf Size returns.
const MaxSize = 256 << 20

// Size rounds a wanted ringbuf size in bytes up to what the kernel takes:
// a power of two of at least one page, here at most MaxSize.
func Size(bytes int) uint32 {
	bytes = max(bytes, os.Getpagesize())
	bytes = min(bytes, MaxSize)
	return uint32(1) << bits.Len32(uint32(bytes-1))
}

// Comm converts a task's comm, as bpf_get_current_comm fills it, into a
// string: the bytes before the first NUL. It returns prev, allocating
// nothing, when prev is that name already: readers pass the name their
// reused destination holds, and threads rarely rename.
func Comm(comm *[16]int8, prev string) string {
	n := 0
	for n < len(comm) && comm[n] != 0 {
		n++
	}
	name := unsafe.Slice((*byte)(unsafe.Pointer(&comm[0])), n)
	if string(name) == prev { // compared without a conversion
		return prev
	}
	return string(name)
}
