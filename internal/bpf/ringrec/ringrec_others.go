//go:build !linux

package ringrec

import "errors"

// ErrFlushed is returned by Read after Flush; BPF ringbufs exist only on
// linux.
var ErrFlushed = errors.New("ringbuf flushed")
