//go:build linux && (amd64 || arm64)

package profiler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/counters"
	"github.com/bpfcol/bpfcol/internal/bpf/ringrec"
	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
	"github.com/bpfcol/bpfcol/internal/bpf/support"
)

// Fields of a record beyond profilerSampleFlag, generated from enum
// sample_layout.
const (
	flagStopShift = profilerSampleLayoutSAMPLE_STOP_SHIFT
	flagStopMask  = uint32(profilerSampleLayoutSAMPLE_STOP_MASK)
	framePCExact  = 1 << profilerSampleLayoutFRAME_PC_EXACT_SHIFT
	recordSize    = int(unsafe.Sizeof(profilerSample{}))
)

// Sampler is a loaded and attached stack sampler.
type Sampler struct {
	objs profilerObjects
	// The off-CPU programs loaded, nil when off-CPU events are disabled:
	// off_cpu_switch with task work, else off_cpu_switch_walk.
	offCPUSwitch, offCPUExit *ebpf.Program
	offCPUTaskWork           bool
	links                    []link.Link
	events                   []int
	reader                   *ringrec.Reader[profilerSample]
	notices                  *ringrec.Reader[profilerNotice]
	ncpu                     int
	rows                     uint32
	// composeErr says why user space reads processes' mappings (nil:
	// BPF does).
	composeErr error
	// interp bounds each runtime's entries in interp_procs.
	interp *interpProcs
	// unpack holds a packed record unpacked.
	unpack unpacker
}

// New checks that the kernel and the process's capabilities allow sampling,
// then loads the sampler and attaches it to every online CPU. Sampling starts
// before New returns.
func New(opts Options) (_ *Sampler, err error) {
	if opts.Frequency <= 0 {
		return nil, fmt.Errorf("sampling frequency %d Hz: must be positive", opts.Frequency)
	}
	if err := CheckSupport(); err != nil {
		return nil, err
	}
	cpus, err := OnlineCPUs()
	if err != nil {
		return nil, err
	}

	spec, err := loadProfiler()
	if err != nil {
		return nil, fmt.Errorf("loading sampler spec: %w", err)
	}
	spec.Maps[profilerMapSamples].MaxEntries = ringBufferSize(opts, len(cpus))
	spec.Maps[profilerMapUnwindRows].MaxEntries = unwindRows(opts) + MaxVDSORows
	spec.Maps[profilerMapUnwindProcs].MaxEntries = unwindProcesses(opts)
	if opts.UnwindFiles > 0 {
		spec.Maps[profilerMapUnwindFiles].MaxEntries = uint32(opts.UnwindFiles)
	}

	if err := spec.Variables[profilerVarFmodeBacking].Set(fmodeBacking(kernelRelease())); err != nil {
		return nil, fmt.Errorf("setting FMODE_BACKING: %w", err)
	}
	composeErr := composeInBPF()
	if err := spec.Variables[profilerVarComposeInTaskWork].Set(composeErr == nil); err != nil {
		return nil, fmt.Errorf("setting where mappings are read: %w", err)
	}
	interp := configureInterpProcs(spec, opts)
	if err := configurePython(spec, opts); err != nil {
		return nil, err
	}
	if err := configureHotSpot(spec, opts); err != nil {
		return nil, err
	}
	if err := configureV8(spec, opts); err != nil {
		return nil, err
	}

	if err := configureOffCPU(spec, opts.OffCPU, opts.PID); err != nil {
		return nil, err
	}
	loadOpts, err := configureScopes(spec, opts.Scopes)
	if err != nil {
		return nil, err
	}
	loadOpts.Cache = support.KernelTypes()

	s := &Sampler{ncpu: len(cpus), rows: unwindRows(opts), composeErr: composeErr, interp: interp}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.load(spec, opts.OffCPU.Enabled, loadOpts); err != nil {
		return nil, fmt.Errorf("loading sampler: %w", explainPermission(err))
	}
	if s.reader, err = ringrec.NewReader[profilerSample](s.objs.Samples, "sample"); err != nil {
		return nil, err
	}
	if s.notices, err = ringrec.NewVarReader[profilerNotice](s.objs.Notices, "notice"); err != nil {
		return nil, err
	}
	// Exits before samples: a process given mappings by a sample always
	// has its exit seen.
	l, err := link.AttachTracing(link.TracingOptions{Program: s.objs.ProcExit})
	if err != nil {
		return nil, fmt.Errorf("attaching the sampler's exit program to tp_btf/sched_process_exit: %w", err)
	}
	s.links = append(s.links, l)
	targets, err := eventTargets(opts, cpus)
	if err != nil {
		return nil, err
	}
	for _, tg := range targets {
		cpu := tg.cpu
		fd, err := openCPUClock(tg.pid, cpu, opts.Frequency)
		if err != nil {
			return nil, err
		}
		s.events = append(s.events, fd)
		l, err := link.AttachRawLink(link.RawLinkOptions{
			Target:  fd,
			Program: s.objs.SampleStack,
			Attach:  ebpf.AttachPerfEvent,
		})
		if err != nil {
			return nil, fmt.Errorf("attaching sampler to cpu %d: %w", cpu, err)
		}
		s.links = append(s.links, l)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return nil, fmt.Errorf("enabling cpu-clock event on cpu %d: %w", cpu, err)
		}
	}
	if s.offCPUSwitch != nil {
		// Exits first: a thread given a slot by the switch program
		// always has its exit seen.
		for _, p := range []struct {
			prog *ebpf.Program
			tp   string
		}{{s.offCPUExit, "sched_process_exit"}, {s.offCPUSwitch, "sched_switch"}} {
			l, err := link.AttachTracing(link.TracingOptions{Program: p.prog})
			if err != nil {
				return nil, fmt.Errorf("attaching off-CPU program to tp_btf/%s: %w", p.tp, err)
			}
			s.links = append(s.links, l)
		}
	}
	return s, nil
}

// onCPUObjects are what every sampler loads.
type onCPUObjects struct {
	profilerMaps
	profilerVariables
	SampleStack *ebpf.Program `ebpf:"sample_stack"`
	ProcExit    *ebpf.Program `ebpf:"proc_exit"`
}

// load loads the maps and the programs in use: the off-CPU programs only
// when enabled, so a sampler without them pays no verification for them,
// and of those the pair the kernel can run: with task work, the user stack
// is walked on the thread's return to user space, else in sched_switch.
func (s *Sampler) load(spec *ebpf.CollectionSpec, offCPU bool, opts *ebpf.CollectionOptions) error {
	if s.composeErr != nil {
		// The sampler that asks user space to read mappings, under the
		// name the objects load it by.
		spec = spec.Copy()
		spec.Programs[profilerProgSampleStack] = spec.Programs[profilerProgSampleStackUser]
		delete(spec.Programs, profilerProgSampleStackUser)
	}
	var on *onCPUObjects
	switch {
	case !offCPU:
		on = new(onCPUObjects)
		if err := spec.LoadAndAssign(on, opts); err != nil {
			return err
		}
	case offCPUTaskWork() == nil:
		var objs struct {
			onCPUObjects
			Switch *ebpf.Program `ebpf:"off_cpu_switch"`
			Exit   *ebpf.Program `ebpf:"off_cpu_exit"`
		}
		if err := spec.LoadAndAssign(&objs, opts); err != nil {
			return err
		}
		on = &objs.onCPUObjects
		s.objs.OffCpuSwitch, s.objs.OffCpuExit = objs.Switch, objs.Exit
		s.offCPUSwitch, s.offCPUExit, s.offCPUTaskWork = objs.Switch, objs.Exit, true
	default:
		var objs struct {
			onCPUObjects
			Switch *ebpf.Program `ebpf:"off_cpu_switch_walk"`
			Exit   *ebpf.Program `ebpf:"off_cpu_exit_walk"`
		}
		if err := spec.LoadAndAssign(&objs, opts); err != nil {
			return err
		}
		on = &objs.onCPUObjects
		s.objs.OffCpuSwitchWalk, s.objs.OffCpuExitWalk = objs.Switch, objs.Exit
		s.offCPUSwitch, s.offCPUExit = objs.Switch, objs.Exit
	}
	s.objs.profilerMaps, s.objs.profilerVariables = on.profilerMaps, on.profilerVariables
	s.objs.SampleStack, s.objs.ProcExit = on.SampleStack, on.ProcExit
	return nil
}

// ComposeError says why the sampler asks user space to read processes'
// mappings from /proc (NoticeRead) instead of reading them in BPF: the
// kernel feature missing. Nil when BPF reads them.
func (s *Sampler) ComposeError() error { return s.composeErr }

// OffCPUTaskWork says whether off-CPU user stacks are walked on the
// thread's return to user space (kernel 6.18 task work), not in
// sched_switch.
func (s *Sampler) OffCPUTaskWork() bool { return s.offCPUTaskWork }

// configureOffCPU sets the off-CPU program's constants and bounds.
func configureOffCPU(spec *ebpf.CollectionSpec, o OffCPUOptions, pid int) error {
	if !o.Enabled {
		return nil
	}
	if err := spec.Variables[profilerVarOffCpuTgid].Set(uint32(pid)); err != nil {
		return fmt.Errorf("setting the off-CPU process: %w", err)
	}
	if !(o.Probability > 0 && o.Probability <= 1) {
		return fmt.Errorf("off-CPU probability %v: must be in (0, 1]", o.Probability)
	}
	if o.MinDuration < 0 {
		return fmt.Errorf("off-CPU min duration %v: must not be negative", o.MinDuration)
	}
	if err := CheckOffCPUSupport(); err != nil {
		return err
	}
	gapInt, gapFrac, log2Frac := offCPUGaps(o.Probability)
	for name, v := range map[string]any{
		profilerVarOffCpuGapInt:   gapInt,
		profilerVarOffCpuGapFrac:  gapFrac,
		profilerVarOffCpuLog2Frac: log2Frac,
		profilerVarOffCpuRngs:     offCPUCountdowns(o.Probability),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting off-CPU probability: %w", err)
		}
	}
	if err := spec.Variables[profilerVarOffCpuMinNs].Set(uint64(o.MinDuration)); err != nil {
		return fmt.Errorf("setting off-CPU min duration: %w", err)
	}
	if o.MaxThreads > 0 {
		if err := spec.Variables[profilerVarOffCpuMaxThreads].Set(uint64(o.MaxThreads)); err != nil {
			return fmt.Errorf("setting off-CPU thread bound: %w", err)
		}
		// A thread holds a task work only while it holds a slot.
		spec.Maps[profilerMapOffCpuWorks].MaxEntries = uint32(o.MaxThreads)
	}
	return nil
}

// offCPUGaps returns what the off-CPU program draws the gaps between
// sampled switch-outs with, for sampling each with probability p: the
// geometric distribution's 1 / -log2(1 - p), as its integer part and its
// fraction times 2^32 (0 when p is 1: no gaps), and the table of
// log2(1 + (i + 1/2) / 256) times 2^16 it takes logarithms with.
func offCPUGaps(p float64) (gapInt, gapFrac uint64, log2Frac [256]uint32) {
	for i := range log2Frac {
		log2Frac[i] = uint32(math.Round(math.Log2(1+(float64(i)+0.5)/256) * (1 << 16)))
	}
	if p >= 1 {
		return 0, 0, log2Frac
	}
	c := 1 / -math.Log2(1-p)
	i, f := math.Modf(c)
	return uint64(i), uint64(f * (1 << 32)), log2Frac
}

// offCPUCountdowns returns the off-CPU program's per-CPU countdowns,
// started as the gaps between sampled switch-outs are drawn, for
// probability p, and random states to draw the next gaps from.
func offCPUCountdowns(p float64) (rngs [256]profilerOffCpuRng) {
	for i := range rngs {
		if p < 1 {
			rngs[i].Left = uint64(math.Floor(math.Log(1-rand.Float64()) / math.Log1p(-p)))
		}
		rngs[i].State = rand.Uint64() | 1
	}
	return rngs
}

// configureScopes makes the programs link samples to open probe scopes in
// the shared map m; without it they keep their placeholder map and skip
// the lookups.
func configureScopes(spec *ebpf.CollectionSpec, m *ebpf.Map) (*ebpf.CollectionOptions, error) {
	if m == nil {
		return &ebpf.CollectionOptions{}, nil
	}
	spec.Maps[profilerMapOpenScopes].MaxEntries = m.MaxEntries()
	if err := spec.Variables[profilerVarScopeLinks].Set(true); err != nil {
		return nil, fmt.Errorf("enabling scope links: %w", err)
	}
	return &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{profilerMapOpenScopes: m}}, nil
}

// offCPUEventsPerSecond is the rate of off-CPU events per CPU the default
// ringbuf size leaves room for, on top of the on-CPU samples.
const offCPUEventsPerSecond = 500

// ringBufferSize sizes the ringbuf for about two seconds of samples on every
// CPU, so a stalled reader loses samples (counted) instead of memory growing.
func ringBufferSize(opts Options, ncpu int) uint32 {
	size := opts.RingBufferBytes
	if size <= 0 {
		rate := opts.Frequency
		if opts.OffCPU.Enabled {
			rate += offCPUEventsPerSecond
		}
		size = 2 * ncpu * rate * (recordSize + 8)
	}
	return ringrec.Size(size)
}

func openCPUClock(pid, cpu, frequency int) (int, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(frequency),
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, pid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("opening cpu-clock perf event on cpu %d: %w", cpu, explainPermission(err))
	}
	return fd, nil
}

// SetDeadline makes Read return ErrDeadline once t has passed and every
// sample already in the ringbuf was read. The BPF program wakes a reader
// only when the ringbuf is half full, so readers drain on a timer.
func (s *Sampler) SetDeadline(t time.Time) { s.reader.SetDeadline(t) }

// Read blocks until the next sample arrives and decodes it into dst. It
// returns ErrDeadline when the deadline passed with nothing left to read,
// ErrFlushed once after Flush, and ErrClosed once the Sampler is closed. dst's slices are reused.
func (s *Sampler) Read(dst *Sample) error {
	raw, err := s.reader.ReadRaw()
	if err != nil {
		return err
	}
	if packed(raw) {
		rec, tail := s.unpack.of(raw)
		decode(rec, tail, dst)
		return nil
	}
	rec, err := s.reader.Decode()
	if err != nil {
		return err
	}
	var tail []byte
	if len(raw) > interpTail {
		tail = raw[interpTail:]
	}
	decode(rec, tail, dst)
	return nil
}

// decode fills dst from a record and its interpreter tail (nil: none).
func decode(rec *profilerSample, tail []byte, dst *Sample) {
	dst.KtimeNs = rec.KtimeNs
	dst.PID, dst.TID, dst.CPU = rec.Pid, rec.Tid, rec.Cpu
	dst.Comm = ringrec.Comm(&rec.Comm, dst.Comm)
	dst.Kernel = appendFrames(dst.Kernel[:0], rec.Kernel[:], rec.KernelBytes)
	dst.User = appendFrames(dst.User[:0], rec.User[:], rec.UserBytes)
	dst.UserPCs = [2]uint64{}
	for i, a := range dst.User {
		if a&framePCExact != 0 {
			dst.User[i] = a &^ framePCExact
			dst.UserPCs[i/64] |= 1 << (i % 64)
		}
	}
	dst.UserIP, dst.UserSP, dst.UserBP = rec.UserIp, rec.UserSp, rec.UserBp
	dst.LeafWords = rec.LeafWords
	dst.LeafWordsValid = rec.Flags&uint32(profilerSampleFlagSAMPLE_LEAF_WORDS_VALID) != 0
	dst.KernelThread = rec.Flags&uint32(profilerSampleFlagSAMPLE_KERNEL_THREAD) != 0
	dst.CFI = rec.Flags&uint32(profilerSampleFlagSAMPLE_CFI) != 0
	dst.Complete = rec.Flags&uint32(profilerSampleFlagSAMPLE_COMPLETE) != 0
	dst.UnknownMapping = rec.Flags&uint32(profilerSampleFlagSAMPLE_UNKNOWN_MAPPING) != 0
	dst.NoTable = rec.Flags&uint32(profilerSampleFlagSAMPLE_NO_TABLE) != 0
	dst.LeafFramePointer = rec.Flags&uint32(profilerSampleFlagSAMPLE_LEAF_FP) != 0
	dst.Stop = StopNoTable
	if dst.CFI {
		dst.Stop = StopReason(rec.Flags >> flagStopShift & flagStopMask)
	}
	dst.OffCPU = rec.Flags&uint32(profilerSampleFlagSAMPLE_OFF_CPU) != 0
	dst.OffCPUNs = rec.OffCpuNs
	dst.Preempted = rec.Flags&uint32(profilerSampleFlagSAMPLE_PREEMPTED) != 0
	dst.InScope = rec.Flags&uint32(profilerSampleFlagSAMPLE_SCOPE) != 0
	dst.Scope = scopes.Link{}
	if dst.InScope {
		dst.Scope = scopes.Link{TraceID: rec.Link.TraceId, SpanID: rec.Link.SpanId, ProbeID: rec.Link.ProbeId}
	}
	dst.Interp, dst.InterpStop = decodeInterp(tail, dst.Interp[:0])
}

func appendFrames(dst, frames []uint64, nbytes int32) []uint64 {
	if nbytes <= 0 {
		return dst
	}
	n := min(int(nbytes)/8, len(frames))
	return append(dst, frames[:n]...)
}

// Counters sums the sampler's counters over all CPUs.
func (s *Sampler) Counters() (Counters, error) {
	v, err := counters.Sum(s.objs.Counters, int(profilerCounterCOUNTER_MAX))
	if err != nil {
		return Counters{}, fmt.Errorf("reading sampler counters: %w", err)
	}
	c := Counters{
		Samples:           v[profilerCounterCOUNTER_SAMPLES],
		DroppedRingbuf:    v[profilerCounterCOUNTER_DROPPED_RINGBUF],
		UserStackErrors:   v[profilerCounterCOUNTER_USER_STACK_ERR],
		KernelStackErrors: v[profilerCounterCOUNTER_KERNEL_STACK_ERR],
		SPReadErrors:      v[profilerCounterCOUNTER_SP_READ_ERR],
		Idle:              v[profilerCounterCOUNTER_IDLE],
	}
	copy(c.UnwindStops[:], v[profilerCounterCOUNTER_UNWIND_STOP:profilerCounterCOUNTER_INTERP_STOP])
	c.OffCPUEvents = v[profilerCounterCOUNTER_OFF_CPU_EVENTS]
	c.OffCPUShort = v[profilerCounterCOUNTER_OFF_CPU_SHORT]
	c.OffCPUFull = v[profilerCounterCOUNTER_OFF_CPU_FULL]
	c.OffCPUMerged = v[profilerCounterCOUNTER_OFF_CPU_MERGED]
	c.OffCPUBusy = v[profilerCounterCOUNTER_OFF_CPU_BUSY]
	c.OffCPUTaskWorkRefused = v[profilerCounterCOUNTER_OFF_CPU_SCHED_ERR]
	c.OffCPUGone = v[profilerCounterCOUNTER_OFF_CPU_GONE]
	c.OffCPUUnended = v[profilerCounterCOUNTER_OFF_CPU_UNENDED]
	c.NoticesLost = v[profilerCounterCOUNTER_NOTICES_LOST]
	c.FilesFull = v[profilerCounterCOUNTER_FILES_FULL]
	c.ProcessesFull = v[profilerCounterCOUNTER_PROCS_FULL]
	c.ComposeBusy = v[profilerCounterCOUNTER_COMPOSE_BUSY]
	c.ComposeOverflow = v[profilerCounterCOUNTER_COMPOSE_OVERFLOW]
	c.ComposeDeferred = v[profilerCounterCOUNTER_COMPOSE_DEFERRED]
	c.ComposeGone = v[profilerCounterCOUNTER_COMPOSE_GONE]
	c.ComposeRefused = v[profilerCounterCOUNTER_COMPOSE_REFUSED]
	c.OffCPUUnreported = v[profilerCounterCOUNTER_OFF_CPU_UNREPORTED]
	c.InterpSamples = v[profilerCounterCOUNTER_INTERP_SAMPLES]
	copy(c.InterpStops[:], v[profilerCounterCOUNTER_INTERP_STOP:profilerCounterCOUNTER_JIT_FRAME])
	copy(c.JITFrames[:], v[profilerCounterCOUNTER_JIT_FRAME:profilerCounterCOUNTER_MAX])
	return c, nil
}

// UnendedThreads returns the threads that lost kept off-CPU waits
// (Counters.OffCPUUnended), with how many each; the most recent few
// hundred threads only.
func (s *Sampler) UnendedThreads() (map[uint32]uint64, error) {
	out, err := threadCounts(s.objs.OffCpuUnendedTids)
	if err != nil {
		return nil, fmt.Errorf("reading the threads that lost off-CPU waits: %w", err)
	}
	return out, nil
}

// threadCounts reads a per-thread count map (tid -> count).
func threadCounts(m *ebpf.Map) (map[uint32]uint64, error) {
	out := map[uint32]uint64{}
	var tid uint32
	var n uint64
	it := m.Iterate()
	for it.Next(&tid, &n) {
		out[tid] = n
	}
	return out, it.Err()
}

// UnreportedThreads returns the threads whose switch-in the kernel did
// not report to sched_switch (Counters.OffCPUUnreported), with how many
// each: the only way a thread loses a kept wait. The most recent few
// hundred threads only.
func (s *Sampler) UnreportedThreads() (map[uint32]uint64, error) {
	out, err := threadCounts(s.objs.OffCpuUnreportedTids)
	if err != nil {
		return nil, fmt.Errorf("reading the threads whose switch-ins went unreported: %w", err)
	}
	return out, nil
}

// CPUs is how many CPUs the sampler is attached to.
func (s *Sampler) CPUs() int { return s.ncpu }

// Stop detaches the sampler from every CPU: no sample is recorded after it
// returns. The ringbuf and the counters stay open, so what was recorded can
// still be read and counted. It is safe to call more than once.
func (s *Sampler) Stop() error {
	var errs []error
	// First samples still waiting for their task work are not sent from
	// here on: they would come after the ringbuf was read to its end.
	if s.objs.SamplingStopped != nil {
		if err := s.objs.SamplingStopped.Set(uint32(1)); err != nil {
			errs = append(errs, fmt.Errorf("marking sampling stopped: %w", err))
		}
	}
	// Disabling the event waits for a sample being taken on its CPU, so
	// every record reserved before Stop returns is also submitted.
	for _, fd := range s.events {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
			errs = append(errs, fmt.Errorf("disabling cpu-clock event: %w", err))
		}
	}
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	s.links = nil
	for _, fd := range s.events {
		errs = append(errs, unix.Close(fd))
	}
	s.events = nil
	return errors.Join(errs...)
}

// Flush wakes the reader: Read returns the samples already in the ringbuf,
// then ErrFlushed once. After Stop, that drains the ringbuf to its end.
func (s *Sampler) Flush() error {
	if err := s.reader.Flush(); err != nil {
		return fmt.Errorf("flushing sample ringbuf: %w", err)
	}
	return nil
}

// Close stops the sampler and frees its maps. A blocked Read returns
// ErrClosed. It is safe to call more than once.
func (s *Sampler) Close() error {
	errs := []error{s.Stop()}
	// The readers stay set: a concurrent or later Read must see them
	// closed.
	errs = append(errs, s.reader.Close(), s.notices.Close())
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}

// OnlineCPUs is the CPUs online now, from /sys/devices/system/cpu/online
// ("0-3,5").
func OnlineCPUs() ([]int, error) {
	data, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("reading online cpus: %w", err)
	}
	return parseCPUList(strings.TrimSpace(string(data)))
}

func parseCPUList(list string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parsing cpu list %q: %w", list, err)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parsing cpu list %q: %w", list, err)
			}
		}
		for cpu := first; cpu <= last; cpu++ {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, nil
}
