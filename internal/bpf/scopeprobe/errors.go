package scopeprobe

import "github.com/bpfcol/bpfcol/internal/bpf/ringrec"

// ErrClosed is returned by Read once the Probes are closed.
var ErrClosed = ringrec.ErrClosed

// ErrDeadline is returned by Read when the deadline set by SetDeadline
// passed before a record arrived.
var ErrDeadline = ringrec.ErrDeadline

// ErrFlushed is returned by Read once the records present at Flush were
// read.
var ErrFlushed = ringrec.ErrFlushed
