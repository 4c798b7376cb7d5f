package resolve

import (
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/process"
)

// What Resolve returns, and what the profile builder builds from: the
// stacks of one report, named, grouped by process.

// Sample is one stack with how often it was seen.
type Sample struct {
	// Frames holds the leaf first.
	Frames     []frame.Frame
	Count      int64
	Timestamps []uint64
	ThreadID   int64
	ThreadName string
	// OffCPUNs is an off-CPU sample's value: its events' time off CPU.
	OffCPUNs int64
	// Preempted marks off-CPU time of a thread that could have run on.
	Preempted bool
	// Scope is the probe scope the sample was taken in: the sample links
	// to it and names its probe. Nil outside any.
	Scope *Scope
}

// Scope is one outermost probe scope of the uprobe receiver: the ids its
// log record carries, which the samples taken inside it link to.
type Scope struct {
	TraceID [16]byte
	SpanID  [8]byte
	// ProbeID is the scope's probe, named through profilebuilder.Meta.ProbeName.
	ProbeID uint32
}

// Process is one process's named samples.
type Process struct {
	PID int64
	process.Info
	// Samples are on-CPU samples, OffCPUSamples the off-CPU ones: each
	// kind goes into its own profile of the process.
	Samples       []Sample
	OffCPUSamples []Sample
}
