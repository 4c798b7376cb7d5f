package ringrec

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// ErrFlushed is returned by Read once the records present at Flush were
// read.
var ErrFlushed = ringbuf.ErrFlushed

// Reader reads records of type T, the bpf2go-generated mirror of the C
// record, from a ringbuf map. Read is for one goroutine; Flush and Close
// may be called from any.
type Reader[T any] struct {
	what   string
	reader *ringbuf.Reader
	record ringbuf.Record
	value  T
}

// NewReader opens the ringbuf m. what names a record in errors, such as
// "sample".
func NewReader[T any](m *ebpf.Map, what string) (*Reader[T], error) {
	r, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("opening %s ringbuf: %w", what, err)
	}
	return &Reader[T]{what: what, reader: r}, nil
}

// Read blocks until the next record and returns it. The record is valid
// until the next Read: nothing is allocated per record. Read returns
// ErrDeadline when the deadline passed with nothing left to read,
// ErrFlushed once after Flush, and ErrClosed once the Reader is closed.
func (r *Reader[T]) Read() (*T, error) {
	if err := r.reader.ReadInto(&r.record); err != nil {
		switch {
		case errors.Is(err, ringbuf.ErrClosed):
			return nil, ErrClosed
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, ErrDeadline
		case errors.Is(err, ringbuf.ErrFlushed):
			return nil, ErrFlushed
		}
		return nil, fmt.Errorf("reading %s: %w", r.what, err)
	}
	raw := r.record.RawSample
	size := int(unsafe.Sizeof(r.value))
	if len(raw) < size {
		return nil, fmt.Errorf("reading %s: record of %d bytes, want %d", r.what, len(raw), size)
	}
	// The record's bytes are the C struct's; the generated type has the
	// same layout (structs.HostLayout, explicit padding) on this host.
	// Point into the record buffer when its alignment allows, which the
	// Go allocator gives every buffer of 8 bytes or more; copy otherwise.
	if uintptr(unsafe.Pointer(&raw[0]))%unsafe.Alignof(r.value) == 0 {
		return (*T)(unsafe.Pointer(&raw[0])), nil
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r.value)), size), raw)
	return &r.value, nil
}

// SetDeadline makes Read return ErrDeadline once t has passed and every
// record already in the ringbuf was read; the zero time waits forever.
// Call it from the goroutine that reads: it waits for a blocked Read.
func (r *Reader[T]) SetDeadline(t time.Time) { r.reader.SetDeadline(t) }

// Flush wakes a blocked Read: Reads return the records already in the
// ringbuf, then ErrFlushed once.
func (r *Reader[T]) Flush() error { return r.reader.Flush() }

// Close makes a blocked and every later Read return ErrClosed. It is safe
// on a nil Reader and to call more than once.
func (r *Reader[T]) Close() error {
	if r == nil {
		return nil
	}
	return r.reader.Close()
}
