package ebpfprofreceiver

import (
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/interp/hotspot"
	"github.com/bpfcol/bpfcol/internal/interp/python"
	"github.com/bpfcol/bpfcol/internal/interp/v8"
)

// Bounds of the interpreters' state: the processes attached, and the
// objects (code objects) kept to name their frames.
const (
	maxInterpreterProcesses = 1024
	maxInterpreterObjects   = 4 << 20
)

// startInterpreters makes the Manager of the configured interpreters,
// nil when none is: watchNotices tells it of each process the sampler reads,
// the aggregator places the frames it walks, the resolver names them.
func (r *profilesReceiver) startInterpreters() {
	if len(r.cfg.Interpreters) == 0 {
		return
	}
	m := interp.NewManager(interp.Config{
		MaxProcesses: maxInterpreterProcesses,
		CacheBytes:   maxInterpreterObjects,
		// An exited process's last samples are named up to a report
		// interval and two drains after its exit, later when the
		// export lags: its objects stay for two more intervals.
		Linger: 3*r.cfg.ReportInterval + 2*drainInterval,
		Logger: r.set.Logger,
	})
	if r.cfg.interpreter(python.Name) {
		m.Add(python.New(python.Config{Sink: r.sampler, ReadFailures: m.ReadFailures()}))
	}
	if r.cfg.interpreter(hotspot.Name) {
		m.Add(hotspot.New(hotspot.Config{Sink: r.sampler, ReadFailures: m.ReadFailures()}))
	}
	if r.cfg.interpreter(v8.Name) {
		m.Add(v8.New(v8.Config{Sink: r.sampler, ReadFailures: m.ReadFailures()}))
	}
	r.interps = m
}
