// Package hotspot follows HotSpot JVMs (OpenJDK 9 to 22 on x86-64): it
// recognises libjvm.so in a process, reads the JVM's own description of
// its data structures (vmStructs) from the process, writes into the
// sampler where the code cache is and how its frames are laid out
// (internal/bpf/c/include/bpfcol_hotspot.h), and names Java frames from
// the JVM's memory: interpreted methods, compiled methods with the
// methods inlined into them, and stubs.
package hotspot

import (
	"errors"
	"fmt"
	"path"
	"sync"
	"sync/atomic"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

// Name is the interpreter's name in the receiver's settings: the
// OpenTelemetry eBPF profiler's name for the same tracer. It names the JVM
// followed, HotSpot; frames are typed jvm.
const Name = "hotspot"

// libjvmName is the file HotSpot lives in.
const libjvmName = "libjvm.so"

// Sink is where a process's layout goes: the sampler.
type Sink interface {
	SetHotSpotProc(pid uint32, p profiler.HotSpotProc) error
	DeleteHotSpotProc(pid uint32) error
}

// Config configures the client.
type Config struct {
	Sink Sink
	// ReadFailures counts the reads of processes' memory that failed.
	ReadFailures *atomic.Int64
	// MaxFiles bounds the libjvm builds whose analysis is kept; zero
	// means 32.
	MaxFiles int
	// MethodBytes bounds the methods and names kept to name the frames
	// of compiled code and interpreted methods; zero means 2 MiB.
	MethodBytes int64
}

// Client is the HotSpot client.
type Client struct {
	cfg Config
	// files caches, by file, what a libjvm build is: its exported
	// symbols, and once a process was read, its layout (or why bpfcol
	// cannot follow it).
	files *lru.Cache[process.FileKey, *fileFacts]
	mu    sync.Mutex // one analysis of a file at a time
	// methods and symbols are read once for every frame that names them,
	// by process attach and address.
	methods *lru.Cache[remoteKey, *method]
	symbols *lru.Cache[remoteKey, string]
	serial  atomic.Uint64
}

// remoteKey is an address in one attach of a process.
type remoteKey struct {
	attach uint64
	addr   uint64
}

// fileFacts is what one libjvm build tells.
type fileFacts struct {
	err     error                 // why the file cannot be followed
	symbols map[string]uint64     // the introspection symbols, file addresses
	addrs   *elfbin.AddressMapper // its segments, to find the load bias
	layout  *layout               // read from the first process, for all
	lerr    error                 // why the layout could not be used
}

// New returns the client.
func New(cfg Config) *Client {
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 32
	}
	if cfg.MethodBytes <= 0 {
		cfg.MethodBytes = 2 << 20
	}
	c := &Client{
		cfg:   cfg,
		files: lru.New[process.FileKey, *fileFacts](int64(cfg.MaxFiles), nil),
		methods: lru.New(cfg.MethodBytes*3/4, func(_ remoteKey, m *method) int64 {
			if m == nil {
				return 64
			}
			return 64 + m.bytes()
		}),
		symbols: lru.New(cfg.MethodBytes/4, func(_ remoteKey, s string) int64 { return 64 + int64(len(s)) }),
	}
	return c
}

var _ interp.Client = (*Client)(nil)

// Name implements interp.Client.
func (c *Client) Name() string { return Name }

// Type implements interp.Client.
func (c *Client) Type() frame.Type { return frame.JVM }

// introspection are the symbols libjvm exports to describe itself.
var introspection = []string{
	"gHotSpotVMStructs", "gHotSpotVMStructEntryArrayStride", "gHotSpotVMStructEntryTypeNameOffset",
	"gHotSpotVMStructEntryFieldNameOffset", "gHotSpotVMStructEntryIsStaticOffset",
	"gHotSpotVMStructEntryOffsetOffset", "gHotSpotVMStructEntryAddressOffset",
	"gHotSpotVMTypes", "gHotSpotVMTypeEntryArrayStride", "gHotSpotVMTypeEntryTypeNameOffset",
	"gHotSpotVMTypeEntrySizeOffset",
	"gHotSpotVMIntConstants", "gHotSpotVMIntConstantEntryArrayStride", "gHotSpotVMIntConstantEntryNameOffset",
	"gHotSpotVMIntConstantEntryValueOffset",
	"gHotSpotVMLongConstants", "gHotSpotVMLongConstantEntryArrayStride", "gHotSpotVMLongConstantEntryNameOffset",
	"gHotSpotVMLongConstantEntryValueOffset",
}

// Attach implements interp.Client.
func (c *Client) Attach(pid int, maps []process.Mapping) (interp.Instance, error) {
	var jvm *process.Mapping
	for i := range maps {
		if m := &maps[i]; m.File() && m.Executable() && path.Base(m.Path) == libjvmName {
			jvm = m
			break
		}
	}
	if jvm == nil {
		return nil, nil
	}
	facts := c.facts(pid, jvm)
	if facts.err != nil {
		return nil, fmt.Errorf("%s: %w", jvm.Path, facts.err)
	}
	bias, ok := facts.addrs.LoadBias(jvm.Start, jvm.Offset)
	if !ok {
		return nil, fmt.Errorf("%s: mapping at %#x is not an executable segment", jvm.Path, jvm.Start)
	}
	mem := interp.Memory{PID: pid, Failures: c.cfg.ReadFailures}
	l, err := c.layout(facts, mem, bias)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", jvm.Path, err)
	}
	r := &reader{l: l, mem: mem}
	cc, err := readCodeCache(r, bias)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", jvm.Path, err)
	}
	if err := c.cfg.Sink.SetHotSpotProc(uint32(pid), cc.proc(l)); err != nil {
		return nil, err
	}
	return &instance{
		client:     c,
		attach:     c.serial.Add(1),
		pid:        pid,
		MappedFile: interp.MappedFileOf(jvm),
		reader:     r,
		cache:      cc,
	}, nil
}

// layout returns the build's layout, read from this process the first
// time.
func (c *Client) layout(f *fileFacts, mem memory, bias uint64) (*layout, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.layout != nil || f.lerr != nil {
		return f.layout, f.lerr
	}
	vs, err := readVMStructs(mem, func(name string) (uint64, bool) {
		a, ok := f.symbols[name]
		return a + bias, ok
	})
	if errors.Is(err, errNotReady) {
		// libjvm is mapped, its initializers have not run yet.
		return nil, fmt.Errorf("%w: %w", interp.ErrNotReady, err)
	}
	if err != nil {
		// Not kept: another process may be read.
		return nil, fmt.Errorf("reading vmStructs: %w", err)
	}
	f.layout, f.lerr = readLayout(vs, mem, bias)
	return f.layout, f.lerr
}

// facts returns what the libjvm of m is, analysed once per file.
func (c *Client) facts(pid int, m *process.Mapping) *fileFacts {
	key := m.Key()
	if f, ok := c.files.Get(key); ok {
		return f
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.files.Get(key); ok {
		return f
	}
	f := &fileFacts{}
	file, err := process.OpenMapping(pid, m)
	if err != nil {
		// Not cached: the next process may open it.
		f.err = err
		return f
	}
	defer file.Close()
	defer func() {
		// A file another user controls must not take the collector
		// down with a decoder's bug.
		if p := recover(); p != nil {
			*f = fileFacts{err: fmt.Errorf("analysis failed: %v", p)}
			c.files.Add(key, f)
		}
	}()
	img, err := elfimage.Open(file)
	if err != nil {
		f.err = err
		c.files.Add(key, f)
		return f
	}
	f.symbols = map[string]uint64{}
	for _, name := range introspection {
		s, ok := img.Symbol(name)
		if !ok {
			f.err = fmt.Errorf("%w: libjvm exports no %s", interp.ErrUnsupported, name)
			break
		}
		f.symbols[name] = s.Value
	}
	f.addrs = img.Addresses()
	c.files.Add(key, f)
	return f
}

// instance is one process running a HotSpot JVM.
type instance struct {
	client *Client
	attach uint64
	pid    int
	// MappedFile is the file it was attached through.
	interp.MappedFile
	reader *reader
	cache  *codeCache
}

// Loops implements interp.Instance: HotSpot's frames are found by the
// native walk, not under an interpreter loop.
func (in *instance) Loops() []interp.Range { return nil }

// Detach implements interp.Instance.
func (in *instance) Detach() error {
	drop := func(k remoteKey) bool { return k.attach == in.attach }
	in.client.methods.RemoveFunc(func(k remoteKey, _ *method) bool { return drop(k) })
	in.client.symbols.RemoveFunc(func(k remoteKey, _ string) bool { return drop(k) })
	return in.client.cfg.Sink.DeleteHotSpotProc(uint32(in.pid))
}
