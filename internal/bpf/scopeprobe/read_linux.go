//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/ringrec"
)

// SetDeadline makes later Reads return ErrDeadline once t has passed; the
// zero time waits forever. Call it only from the goroutine that reads: it
// waits for a blocked Read.
func (p *Probes) SetDeadline(t time.Time) { p.reader.SetDeadline(t) }

// Flush wakes a blocked Read: Reads return the records already in the
// ringbuf, then ErrFlushed once. Safe from any goroutine.
func (p *Probes) Flush() error { return p.reader.Flush() }

// Read blocks until the next record and decodes it into dst.
func (p *Probes) Read(dst *Record) error {
	r, err := p.reader.Read()
	if err != nil {
		return err
	}
	dst.StartNs, dst.EndNs = r.StartNs, r.EndNs
	dst.PID, dst.TID, dst.ProbeID, dst.Nested = r.Pid, r.Tid, r.ProbeId, r.Nested
	dst.MainThread = r.Flags&uint32(uprobeRecordFlagRECORD_MAIN_THREAD) != 0
	dst.Comm = ringrec.Comm(&r.Comm, dst.Comm)
	dst.TraceID, dst.SpanID = r.TraceId, r.SpanId
	return nil
}
