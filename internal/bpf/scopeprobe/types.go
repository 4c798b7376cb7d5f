package scopeprobe

import (
	"time"

	"github.com/cilium/ebpf"
)

// Setting is what the BPF programs enforce for one probe.
type Setting struct {
	// MinDuration drops scopes that closed sooner.
	MinDuration time.Duration
	// MainThreadOnly ignores outermost entries on threads other than the
	// process's main thread (tid == tgid).
	MainThreadOnly bool
	// PIDs, when not empty, ignores outermost entries in other processes.
	PIDs []uint32
}

// SiteKind says what a uprobe site does to a scope.
type SiteKind int

// The kinds of sites.
const (
	// Entry opens (or deepens) a scope.
	Entry SiteKind = iota
	// Exit closes (or makes shallower) a scope; it is a plain uprobe, for
	// example on a RET instruction or on the entry of an exit function.
	Exit
	// ReturnProbe closes a scope when the function at Offset returns, with a
	// uretprobe. Never for Go code: Go moves stacks and checks return PCs.
	ReturnProbe
)

// String names the kind in logs and errors.
// attachOrder is the order sites are attached in: what closes a scope
// before what opens it. An entry attached first could open a scope in a
// call that is under way while its exit is attached: that scope would never
// close, and the thread's later calls would count as nested in it, never
// recorded. Attached the other way, such a call's exit finds no scope and
// is counted as one without entry. Links close in the reverse order.
var attachOrder = [...]SiteKind{ReturnProbe, Exit, Entry}

// kindRank is k's place in attachOrder.
func kindRank(k SiteKind) int {
	for i, o := range attachOrder {
		if o == k {
			return i
		}
	}
	return len(attachOrder)
}

func (k SiteKind) String() string {
	switch k {
	case Entry:
		return "entry"
	case Exit:
		return "exit"
	case ReturnProbe:
		return "uretprobe"
	}
	return "unknown"
}

// Site is one uprobe to attach.
type Site struct {
	Kind SiteKind
	// Offset is the probed instruction's file offset in the binary (for a
	// ReturnProbe, an instruction reached with the return address still on
	// top of the stack: the function's first one, or the emulated one the
	// entry was moved to).
	Offset uint64
	// RefCtrOffset is the file offset of a USDT semaphore the kernel
	// increments while the uprobe is attached; zero for none.
	RefCtrOffset uint64
	// Symbol names the site in errors and logs, such as "main.work+0x4".
	Symbol string
	// ProbeID is the index of the probe's Setting.
	ProbeID uint32
	// ScopeByGoroutine keys the scope by the goroutine (R14 on amd64)
	// instead of the thread: for Go code.
	ScopeByGoroutine bool
	// ReturnProbeExit marks every site of a probe whose exit is a
	// ReturnProbe: the kernel hooks at most 64 pending returns per
	// thread, and the scope programs then count only the calls whose
	// return it hooks.
	ReturnProbeExit bool
}

// Record is one completed outermost scope.
type Record struct {
	// StartNs and EndNs are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns)
	// at the outermost entry and at its exit.
	StartNs, EndNs uint64
	// PID is the process, TID the thread that closed the scope.
	PID, TID uint32
	// ProbeID is the index of the probe.
	ProbeID uint32
	// Nested counts the inner scopes the outermost one absorbed.
	Nested uint32
	// MainThread is set when TID is the process's main thread.
	MainThread bool
	// Comm is the name of the thread TID.
	Comm string
	// TraceID and SpanID are the scope's fresh ids, drawn at its outermost
	// entry: the ids samples taken inside it link to.
	TraceID [16]byte
	SpanID  [8]byte
}

// Counters are the BPF side's own counts since load.
type Counters struct {
	// Records counts records written to the ringbuf.
	Records uint64
	// LostRingbuf counts records lost because the ringbuf was full.
	LostRingbuf uint64
	// ExitWithoutEntry counts exits that found no open scope, and were
	// ignored.
	ExitWithoutEntry uint64
	// Short counts scopes dropped for lasting less than min_duration.
	Short uint64
	// ScopeFull counts entries whose scope could not be stored.
	ScopeFull uint64
	// ReturnUnprobed counts outermost entries not timed because the
	// kernel would not hook their return: 64 returns were pending on the
	// thread already.
	ReturnUnprobed uint64
	// Filtered counts outermost entries ignored by main_thread_only or pids.
	Filtered uint64
}

// Options configures the loaded probes.
type Options struct {
	// Settings holds one Setting per probe id.
	Settings []Setting
	// MaxScopes bounds the LRU map of open scopes; zero picks 16384.
	MaxScopes int
	// RingBufferBytes is the record ringbuf size, rounded up to a power of
	// two of at least a page; zero picks 1 MiB.
	RingBufferBytes int
	// LoadFiller also loads the program behind Fill, for benchmarks.
	LoadFiller bool
	// PerfEventUprobes attaches one perf-event uprobe per site even when the
	// kernel has uprobe_multi links (6.6+), which are used otherwise.
	PerfEventUprobes bool
	// WakeupBytes, when positive, lets records wake a blocked Read only once
	// that many bytes wait in the ringbuf: the reader must then poll with
	// SetDeadline, as Read returns what waits when its deadline passes. Zero
	// wakes Read for every record that finds it caught up, which costs the
	// probed thread a wakeup per record at low rates.
	WakeupBytes int
	// Scopes, when set, is the shared map of open scopes (scopes.Acquire):
	// each outermost scope is written to it while open, for the sampler to
	// link its samples to. Unset, no scope is written.
	Scopes *ebpf.Map
	// ScopeProbeBase is added to a probe's id in the shared map, so the
	// ids of several receivers do not collide (scopes.RegisterProbes).
	ScopeProbeBase uint32
	// EmptyPrograms loads programs that do nothing in place of the scope
	// programs, so benchmarks can measure the kernel's own cost of the same
	// sites (the floor under the scope programs).
	EmptyPrograms bool
	// ExpediteAttach sets the kernel's global /sys/kernel/rcu_expedited
	// from the start of each Attach until its first registration is done
	// (the later ones do not wait), when it was clear, so that a
	// registration after a quiet spell waits for an expedited RCU grace
	// period (0.1–0.5 ms) instead of a normal one (4–25 ms). Meanwhile
	// every synchronize_rcu on the host is expedited too. New fails when
	// the knob cannot be written.
	ExpediteAttach bool
}
