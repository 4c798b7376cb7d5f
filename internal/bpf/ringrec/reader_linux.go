package ringrec

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// ErrFlushed is returned by Read once the records present at Flush were
// read.
var ErrFlushed = ringbuf.ErrFlushed

// Reader reads records of type T, the bpf2go-generated mirror of the C
// record, from a ringbuf map. Read is for one goroutine; Flush and Close
// may be called from any.
//
// A Read that waits parks its goroutine in the Go runtime's network
// poller, where the ringbuf's map descriptor is registered, instead of
// blocking a thread in epoll_wait: a thread blocked in a system call keeps
// the runtime's monitor thread polling it every few microseconds to
// milliseconds, which cost more CPU than everything else an idle collector
// does. The ringbuf itself is read through ringbuf.Reader with a deadline
// always in the past, so it never blocks.
type Reader[T any] struct {
	what   string
	short  bool // records may be shorter than T: the rest reads as zero
	reader *ringbuf.Reader
	record ringbuf.Record
	value  T

	// poll is a duplicate of the map's descriptor, registered in the
	// runtime's poller; conn waits on it.
	poll *os.File
	conn syscall.RawConn

	// deadline is the caller's, set by SetDeadline on the reading
	// goroutine.
	deadline time.Time

	// mu orders a Read's arming of its wait against Flush and Close,
	// which interrupt it by moving the poller's deadline into the past.
	mu          sync.Mutex
	interrupted bool
	closed      bool
}

// past is a deadline that has always passed.
var past = time.Unix(0, 1)

// NewReader opens the ringbuf m. what names a record in errors, such as
// "sample".
func NewReader[T any](m *ebpf.Map, what string) (*Reader[T], error) {
	r, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("opening %s ringbuf: %w", what, err)
	}
	r.SetDeadline(past)
	fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("duplicating the %s ringbuf's descriptor: %w", what, err)
	}
	// Non-blocking, os.NewFile registers the descriptor in the poller.
	// The flag is the open file's, shared with the map's descriptor: no
	// BPF operation looks at it.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		r.Close()
		return nil, fmt.Errorf("making the %s ringbuf's descriptor non-blocking: %w", what, err)
	}
	poll := os.NewFile(uintptr(fd), what+" ringbuf")
	conn, err := poll.SyscallConn()
	if err == nil {
		// A descriptor the poller refused would make every wait a
		// blocking one: better to fail here.
		err = poll.SetReadDeadline(time.Time{})
	}
	if err != nil {
		poll.Close()
		r.Close()
		return nil, fmt.Errorf("polling the %s ringbuf: %w", what, err)
	}
	return &Reader[T]{what: what, reader: r, poll: poll, conn: conn}, nil
}

// NewVarReader is NewReader for records of varying length, at most a T:
// the bytes a record lacks read as zeros. Each record is copied.
func NewVarReader[T any](m *ebpf.Map, what string) (*Reader[T], error) {
	r, err := NewReader[T](m, what)
	if err != nil {
		return nil, err
	}
	r.short = true
	return r, nil
}

// Read blocks until the next record and returns it. The record is valid
// until the next Read: nothing is allocated per record. Read returns
// ErrDeadline when the deadline passed with nothing left to read,
// ErrFlushed once after Flush, and ErrClosed once the Reader is closed.
//
// Like a blocking ringbuf read, a waiting Read wakes when the kernel wakes
// the ringbuf's readers: for a record submitted without
// BPF_RB_NO_WAKEUP into an empty ringbuf, or with BPF_RB_FORCE_WAKEUP.
func (r *Reader[T]) Read() (*T, error) {
	if _, err := r.ReadRaw(); err != nil {
		return nil, err
	}
	return r.decode()
}

// ReadRaw is Read without the decoding: it returns the record's bytes,
// valid until the next read, for a reader whose records have more than
// one layout; Decode then reads one of T's layout.
func (r *Reader[T]) ReadRaw() ([]byte, error) {
	for {
		err := os.ErrDeadlineExceeded
		if !r.empty() {
			err = r.reader.ReadInto(&r.record)
		}
		switch {
		case err == nil:
			return r.record.RawSample, nil
		case errors.Is(err, ringbuf.ErrClosed):
			return nil, ErrClosed
		case errors.Is(err, ringbuf.ErrFlushed):
			r.mu.Lock()
			r.interrupted = false
			r.mu.Unlock()
			return nil, ErrFlushed
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return nil, fmt.Errorf("reading %s: %w", r.what, err)
		}
		// The ringbuf is empty.
		if !r.deadline.IsZero() && !time.Now().Before(r.deadline) {
			return nil, ErrDeadline
		}
		if closed := r.wait(); closed {
			return nil, ErrClosed
		}
	}
}

// Decode returns the record ReadRaw returned last as a T.
func (r *Reader[T]) Decode() (*T, error) { return r.decode() }

// Pending reports, without a system call, whether records wait in the
// ringbuf: records submitted without a wakeup wait there until one comes.
func (r *Reader[T]) Pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.closed && r.reader.AvailableBytes() > 0
}

// empty reports, without a system call, that there is nothing to read: no
// record, no flush and not closed.
func (r *Reader[T]) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Close marks the Reader closed before it closes the ringbuf: open
	// here, the ringbuf is still open while mu is held.
	return !r.interrupted && !r.closed && r.reader.AvailableBytes() == 0
}

// wait parks the goroutine until the kernel wakes the ringbuf's readers,
// the deadline passes, or Flush or Close interrupts it. Read looks at the
// ringbuf again, unless wait says the Reader is closed.
func (r *Reader[T]) wait() (closed bool) {
	r.mu.Lock()
	if r.closed || r.interrupted {
		r.mu.Unlock()
		return r.closed
	}
	_ = r.poll.SetReadDeadline(r.deadline)
	r.mu.Unlock()
	first := true
	_ = r.conn.Read(func(uintptr) bool {
		if !first {
			return true
		}
		// The poller forgets a wakeup that came before the wait
		// began: a record that came since the ringbuf was read is read
		// now rather than at the deadline.
		first = false
		r.mu.Lock()
		defer r.mu.Unlock()
		closed = r.closed
		return closed || r.reader.AvailableBytes() > 0
	})
	if !closed {
		r.mu.Lock()
		closed = r.closed
		r.mu.Unlock()
	}
	return closed
}

// decode returns the record just read as a T.
func (r *Reader[T]) decode() (*T, error) {
	raw := r.record.RawSample
	size := int(unsafe.Sizeof(r.value))
	if r.short {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(&r.value)), size)
		clear(dst[copy(dst, raw):])
		return &r.value, nil
	}
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
// Call it from the goroutine that reads.
func (r *Reader[T]) SetDeadline(t time.Time) { r.deadline = t }

// Flush wakes a blocked Read: Reads return the records already in the
// ringbuf, then ErrFlushed once.
func (r *Reader[T]) Flush() error {
	// The ringbuf.Reader's flush event comes first: the interrupted Read
	// finds it when it reads the ringbuf again.
	if err := r.reader.Flush(); err != nil {
		return err
	}
	r.interrupt(false)
	return nil
}

// interrupt wakes a waiting Read and keeps later ones from waiting, until
// the flush is read, or for good when closing. It reports whether the
// Reader was closed already.
func (r *Reader[T]) interrupt(closing bool) (wasClosed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return true
	}
	r.interrupted, r.closed = true, closing
	_ = r.poll.SetReadDeadline(past)
	return false
}

// Close makes a blocked and every later Read return ErrClosed. It is safe
// on a nil Reader and to call more than once.
func (r *Reader[T]) Close() error {
	if r == nil {
		return nil
	}
	// Marked closed first: a waiting Read no longer looks at the ringbuf
	// that is closed next.
	if r.interrupt(true) {
		return nil
	}
	return errors.Join(r.reader.Close(), r.poll.Close())
}
