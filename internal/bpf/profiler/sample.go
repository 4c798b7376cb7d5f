package profiler

import (
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfcol/bpfcol/internal/bpf/ringrec"
	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
)

// ErrClosed is returned by Read once the Sampler is closed.
var ErrClosed = ringrec.ErrClosed

// ErrDeadline is returned by Read when the deadline set by SetDeadline
// passed and the ringbuf is empty.
var ErrDeadline = ringrec.ErrDeadline

// ErrFlushed is returned by Read once the samples in the ringbuf at Flush
// were read.
var ErrFlushed = ringrec.ErrFlushed

// Sample is one decoded stack sample.
type Sample struct {
	// KtimeNs is the CLOCK_MONOTONIC time of the sample.
	KtimeNs uint64
	// PID is the process (thread group) id, TID the thread id.
	PID, TID uint32
	// CPU is the CPU the sample was taken on.
	CPU uint32
	// Comm is the thread's name at the time of the sample.
	Comm string
	// Kernel holds the kernel return addresses, the interrupted PC first.
	Kernel []uint64
	// User holds the user stack found by frame-pointer walking, the
	// interrupted PC first.
	User []uint64
	// UserPCs has bit i set when User[i] (i > 0) is not a return address:
	// the PC interrupted by a signal, or the signal trampoline.
	UserPCs [2]uint64
	// UserIP, UserSP and UserBP are the user registers of the task.
	UserIP, UserSP, UserBP uint64
	// LeafWords, when LeafWordsValid is set, are where the return address
	// of a function that has not saved a frame is: the two words at UserSP
	// on x86-64; the link register (x30) on arm64, the second word 0.
	LeafWords      [2]uint64
	LeafWordsValid bool
	// KernelThread is set for kernel threads, which have no user stack.
	KernelThread bool
	// CFI is set when User was walked with the process's CFI tables.
	// Unless LeafFramePointer is set too, its leaf's caller is exact and
	// no frameless-leaf guess is needed.
	CFI bool
	// LeafFramePointer is set when that walk left the leaf by its frame
	// pointer (code without CFI: Go, JIT): a frameless leaf's caller may
	// be missing, as in a frame-pointer stack.
	LeafFramePointer bool
	// Complete is set when that walk reached the process root: the CFI
	// end marker, or a zero saved RBP in code without CFI (Go, JIT).
	Complete bool
	// UnknownMapping is set when the walk met an address outside the
	// mappings loaded for the process: its mappings changed (dlopen, JIT).
	UnknownMapping bool
	// NoTable is set when the process's tables were not loaded yet; User
	// then holds the frame-pointer stack.
	NoTable bool
	// Stop is why the CFI walk stopped (StopNoTable when there was none).
	Stop StopReason
	// OffCPU is set on an off-CPU event: the stacks and KtimeNs are the
	// thread's at switch-out, OffCPUNs the time until it ran again.
	OffCPU   bool
	OffCPUNs uint64
	// Preempted is set on an off-CPU event of a thread that was still
	// runnable (preempted, or yielded); unset, it blocked.
	Preempted bool
	// InScope is set when a probe scope was open on the thread, or on the
	// goroutine it ran, at the sample (at the switch-out for an off-CPU
	// event); Scope is that scope.
	InScope bool
	Scope   scopes.Link
	// Interp holds the sample's interpreter frames, leaf first, when its
	// process runs an interpreter the sampler walks; InterpStop says why
	// their walk ended.
	Interp     []InterpFrame
	InterpStop InterpStop
}

// IsPC reports whether User[i] is a PC to name as is: the leaf, or a frame
// the kernel entered without a call (a signal frame).
func (s *Sample) IsPC(i int) bool {
	return i == 0 || (i < 128 && s.UserPCs[i/64]&(1<<(i%64)) != 0)
}

// Counters are the sampler's own counts since it was loaded.
type Counters struct {
	// Samples is how many CPU samples were recorded into the ringbuf;
	// Recorded adds the off-CPU ones.
	Samples uint64
	// DroppedRingbuf counts samples lost because the ringbuf was full.
	DroppedRingbuf uint64
	// UserStackErrors counts samples whose user stack could not be read.
	UserStackErrors uint64
	// KernelStackErrors counts samples whose kernel stack could not be read.
	KernelStackErrors uint64
	// SPReadErrors counts samples whose words at the user SP were unreadable.
	SPReadErrors uint64
	// Idle counts samples on the idle task, which are not recorded.
	Idle uint64
	// UnwindStops counts user stack walks by why they stopped.
	UnwindStops [NumStopReasons]uint64
	// OffCPUEvents counts off-CPU events recorded.
	OffCPUEvents uint64
	// OffCPUShort counts sampled switch-outs dropped in BPF because the
	// thread ran again within OffCPU.MinDuration.
	OffCPUShort uint64
	// OffCPUFull counts sampled switch-outs not recorded because
	// OffCPU.MaxThreads threads already had a slot (or none could be
	// allocated).
	OffCPUFull uint64
	// OffCPUMerged counts waits long enough to keep that came before the
	// thread returned to user space from its previous kept wait, in the
	// same syscall: their time was added to that wait's, whose kernel
	// stack stands for them.
	OffCPUMerged uint64
	// OffCPUBusy counts waits long enough to keep but dropped because the
	// thread's previous one was being walked (the walk was preempted).
	OffCPUBusy uint64
	// OffCPUTaskWorkRefused counts kept waits dropped because the kernel
	// refused the task work that walks their user stack.
	OffCPUTaskWorkRefused uint64
	// OffCPUGone counts kept waits dropped because the thread exited or
	// replaced its program (exec) before its user stack was walked.
	OffCPUGone uint64
	// OffCPUUnended counts waits long enough to keep but lost because
	// the thread's switch-in was never seen (found at its next
	// switch-out): their stacks went with it. Walked at the switch-out
	// (kernels before 6.18), such a wait is recorded without its kernel
	// stack instead, counted in KernelStackErrors.
	OffCPUUnended uint64
	// NoticesLost counts notices to user space (files to build, processes
	// read or exited) lost on a full ringbuf; a lost file notice is sent
	// again by the next walk that enters the file.
	NoticesLost uint64
	// FilesFull counts walks that entered a file with no table and could
	// not ask for one: the sampler's file map was full.
	FilesFull uint64
	// ProcessesFull counts reads of a process's mappings not kept: the
	// sampler's process map was full. Its samples are walked with frame
	// pointers.
	ProcessesFull uint64
	// ComposeBusy counts reads of a process's mappings refused because its
	// mmap lock was taken (read again at a later sample).
	ComposeBusy uint64
	// ComposeOverflow counts reads that kept only MaxUnwindMappings
	// executable mappings of a process that had more.
	ComposeOverflow uint64
	// ComposeDeferred counts first samples of a process (or of its new
	// image) walked once its mappings were read, on its return to user
	// space.
	ComposeDeferred uint64
	// ComposeGone counts reads not done because the thread exited or
	// exec'd before returning to user space (a deferred sample is lost
	// with it), and deferred samples not sent because sampling stopped.
	ComposeGone uint64
	// ComposeRefused counts reads not asked for: no free task work slot,
	// or the kernel refused the task work.
	ComposeRefused uint64
	// OffCPUUnreported counts context switches the kernel's sched_switch
	// tracepoint did not report, found at their CPU's next reported one:
	// the cause of OffCPUUnended (a kernel may hide some tasks' switches;
	// the VM measured here hides its agent's).
	OffCPUUnreported uint64
	// InterpSamples counts samples whose interpreter frames were walked;
	// InterpStops counts those walks by why they ended.
	InterpSamples uint64
	InterpStops   [NumInterpStops]uint64
	// JITFrames counts the frames of JIT runtimes' processes (V8) that
	// the walk stepped through by frame pointer, by what they were.
	JITFrames [NumJITFrameResults]uint64
}

// Recorded returns how many samples were recorded into the ringbuf, CPU
// and off-CPU: each is read as one sample.
func (c Counters) Recorded() uint64 { return c.Samples + c.OffCPUEvents }

// Options configures a Sampler.
type Options struct {
	// Frequency is the sampling frequency in Hz on each CPU.
	Frequency int
	// RingBufferBytes is the size of the sample ringbuf. It is rounded up to
	// a power of two of at least one page. Zero picks a size for about two
	// seconds of samples on every CPU.
	RingBufferBytes int
	// UnwindRows is the capacity of the CFI row store, in rows of
	// UnwindRowBytes; zero means 1<<20. At most MaxUnwindRows.
	UnwindRows int
	// UnwindProcesses bounds the processes whose mappings the sampler
	// holds, about 2.6 KiB of kernel memory each; zero means 2048.
	UnwindProcesses int
	// UnwindFiles bounds the files whose tables (or their state) the
	// sampler holds; zero means 16384.
	UnwindFiles int
	// OffCPU configures off-CPU events; unless enabled, their program is
	// neither loaded nor attached.
	OffCPU OffCPUOptions
	// Scopes, when set, is the shared map of open probe scopes
	// (scopes.Acquire): each sample looks up the scope open on its thread
	// or goroutine. Unset, samples carry no scope and pay no lookup.
	Scopes *ebpf.Map
	// PID, when not zero, samples only that process (its threads as they
	// exist at New) instead of every CPU, and follows only its threads'
	// switch-outs off CPU: for benchmarks and tests that must see the
	// program's cost, or its outcomes, on one workload alone. PIDs adds
	// more processes to sample (their switch-outs are not followed).
	PID  int
	PIDs []int
	// Python walks the CPython frames of the processes given a
	// PythonProc (SetPythonProc). Unset, no sample looks for them.
	Python bool
	// PythonProcesses bounds the processes given a PythonProc; zero
	// means 1024.
	PythonProcesses int
	// HotSpot walks the Java frames of the processes given a HotSpotProc
	// (SetHotSpotProc). Unset, no sample looks for them.
	HotSpot bool
	// HotSpotProcesses bounds the processes given a HotSpotProc; zero
	// means 256.
	HotSpotProcesses int
	// V8 reads the V8 frames of the processes given a V8Proc
	// (SetV8Proc). Unset, no sample looks for them.
	V8 bool
	// V8Processes bounds the processes given a V8Proc; zero means 1024.
	V8Processes int
}

// OffCPUOptions configures off-CPU events, taken at sched_switch.
type OffCPUOptions struct {
	Enabled bool
	// MinDuration drops, in BPF, events of threads back on CPU sooner.
	MinDuration time.Duration
	// Probability is the share of switch-outs whose stacks are taken, in
	// (0, 1].
	Probability float64
	// MaxThreads bounds the threads given a record slot (about 2 KiB of
	// task storage each, kept until the thread exits); zero means 4096.
	MaxThreads int
}
