package ebpfprofreceiver

import (
	"slices"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/bpf/support"
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

// interpreterArchs are where the interpreters' frames are read: their
// threads' state through x86-64's thread-local storage, their JIT frames as
// x86-64 code lays them out.
var interpreterArchs = []string{"amd64"}

// chooseInterpreters sets the interpreters this start unwinds: the
// configured ones, none where their frames cannot be read, which the log
// says once (their processes show their native frames).
func (r *profilesReceiver) chooseInterpreters() {
	r.interpreters = slices.Clone(r.cfg.Interpreters)
	err := support.Check(support.Architecture("interpreter frames (Python, Java, JavaScript)", interpreterArchs...))
	if err != nil && len(r.interpreters) > 0 {
		r.set.Logger.Warn("interpreter frames off: their processes show native frames only",
			zap.Strings("interpreters", r.interpreters), zap.Error(err))
		r.interpreters = nil
	}
}

func (r *profilesReceiver) interpreter(name string) bool {
	return slices.Contains(r.interpreters, name)
}

// startInterpreters makes the Manager of the configured interpreters,
// nil when none is: watchNotices tells it of each process the sampler reads,
// the aggregator places the frames it walks, the resolver names them.
func (r *profilesReceiver) startInterpreters() {
	if len(r.interpreters) == 0 {
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
	if r.interpreter(python.Name) {
		m.Add(python.New(python.Config{Sink: r.sampler, ReadFailures: m.ReadFailures()}))
	}
	if r.interpreter(hotspot.Name) {
		m.Add(hotspot.New(hotspot.Config{Sink: r.sampler, ReadFailures: m.ReadFailures()}))
	}
	if r.interpreter(v8.Name) {
		m.Add(v8.New(v8.Config{Sink: r.sampler, ReadFailures: m.ReadFailures()}))
	}
	r.interps = m
}
