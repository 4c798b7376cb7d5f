// Package v8 follows the processes that run V8 (node): it recognises the
// binary V8 is linked into, reads from it, once per file, V8's post-mortem
// data (the v8dbg_* symbols: frame slots, object types and field offsets),
// writes what the BPF walk needs (internal/bpf/c/include/bpfcol_v8.h) per
// process into the sampler, and names JavaScript frames from V8's objects
// in the process's memory: a function's SharedFunctionInfo and Script,
// and, for compiled code, the Code object that holds the machine code a
// frame runs, whose source position and inlining tables give one location
// several lines, innermost first.
package v8

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

// Name is the runtime's name in the receiver's settings.
const Name = "v8"

// Sink is where a process's layout goes: the sampler.
type Sink interface {
	SetV8Proc(pid uint32, p profiler.V8Proc) error
	DeleteV8Proc(pid uint32) error
}

// Config configures the client.
type Config struct {
	Sink Sink
	// ReadFailures counts the reads of processes' memory that failed.
	ReadFailures *atomic.Int64
	// MaxFiles bounds the files whose analysis is kept; zero means 64.
	MaxFiles int
	// ScriptBytes bounds the scripts' line tables kept, over every
	// process; zero means 8 MiB.
	ScriptBytes int64
}

// Client is the V8 client.
type Client struct {
	cfg   Config
	files *lru.Cache[process.FileKey, *fileFacts]
	mu    sync.Mutex // one analysis of a file at a time
	// scripts holds scripts' names and line ends, by process and
	// address: what turns a source position into a line and column.
	scripts *lru.Cache[scriptKey, *script]
	serial  atomic.Uint64
}

type fileFacts struct {
	info *binaryInfo
	err  error
}

type scriptKey struct {
	attach uint64 // the attach of the process (instance.serial)
	addr   uint64
}

// New returns the client.
func New(cfg Config) *Client {
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 64
	}
	if cfg.ScriptBytes <= 0 {
		cfg.ScriptBytes = 8 << 20
	}
	return &Client{
		cfg:     cfg,
		files:   lru.New[process.FileKey, *fileFacts](int64(cfg.MaxFiles), nil),
		scripts: lru.New(cfg.ScriptBytes, func(_ scriptKey, s *script) int64 { return s.bytes() }),
	}
}

var _ interp.Client = (*Client)(nil)

// Name implements interp.Client.
func (c *Client) Name() string { return Name }

// Type implements interp.Client.
func (c *Client) Type() frame.Type { return frame.V8JS }

// Attach implements interp.Client.
func (c *Client) Attach(pid int, maps []process.Mapping) (interp.Instance, error) {
	var v8 *process.Mapping
	for i := range maps {
		m := &maps[i]
		if !m.File() || !m.Executable() || !Candidate(m.Path) {
			continue
		}
		f := c.facts(pid, m)
		if f.info != nil || f.err != nil && !errors.Is(f.err, errNotV8) {
			v8 = m
			break
		}
	}
	if v8 == nil {
		return nil, nil
	}
	facts := c.facts(pid, v8)
	if facts.err != nil {
		if errors.Is(facts.err, ErrUnsupportedVersion) {
			return nil, fmt.Errorf("%s: %w: %w", v8.Path, interp.ErrUnsupported, facts.err)
		}
		return nil, fmt.Errorf("%s: %w", v8.Path, facts.err)
	}
	info := facts.info
	if err := c.cfg.Sink.SetV8Proc(uint32(pid), info.layout.walk()); err != nil {
		return nil, err
	}
	in := &instance{
		pid:        pid,
		client:     c,
		serial:     c.serial.Add(1),
		MappedFile: interp.MappedFileOf(v8),
		heap:       heap{l: info.layout, mem: interp.Memory{PID: pid, Failures: c.cfg.ReadFailures}},
		blob:       info.blobOffsets(),
		codes:      newCodeRanges(maxCodeRanges),
		located:    lru.New[locatedKey, located](maxLocated, nil),
	}
	return in, nil
}

// facts returns what the file of m is, analysed once per file.
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
	file, err := process.OpenMapping(pid, m)
	if err != nil {
		// Not cached: the next process may open it.
		return &fileFacts{err: err}
	}
	defer file.Close()
	f := &fileFacts{}
	defer func() {
		// A file another user controls must not take the collector
		// down with a decoder's bug.
		if p := recover(); p != nil {
			f.info, f.err = nil, fmt.Errorf("%s: analysis failed: %v", m.Path, p)
		}
		c.files.Add(key, f)
	}()
	img, err := elfimage.OpenSymbols(file, wanted)
	if err != nil {
		f.err = fmt.Errorf("%s: %w", m.Path, err)
		return f
	}
	f.info, f.err = analyze(img)
	return f
}

// blobOffsets is the file offset range of the embedded builtins; the
// whole file when the binary does not say where they are.
func (b *binaryInfo) blobOffsets() Range {
	if b.blob.End == 0 {
		return Range{0, ^uint64(0)}
	}
	if off, avail, ok := b.addrs.VirtualAddressToFileOffset(b.blob.Start); ok && b.blob.End-b.blob.Start <= avail {
		return Range{off, off + b.blob.End - b.blob.Start}
	}
	return Range{0, ^uint64(0)}
}

// maxCodeRanges bounds the code objects whose instruction ranges a
// process keeps, to find a frame's code without looking for it.
const maxCodeRanges = 4096

// maxLocated bounds the frames a process keeps located (Locate), for its
// samples read after it exited.
const maxLocated = 4096

// locatedKey is a frame as Locate sees it: its machine code address and
// the function the walk read from it.
type locatedKey struct{ native, fn uint64 }

// located is where Locate found a frame: the object naming it, the offset.
type located struct {
	addr uint64
	off  uint32
}

// instance is one process running V8.
type instance struct {
	pid    int
	client *Client
	serial uint64
	// MappedFile is the file it was attached through.
	interp.MappedFile
	heap heap
	// blob is the file offset range of the embedded builtins.
	blob Range

	mu sync.Mutex
	// streamMap is the map every InstructionStream has, once one was
	// found: it makes looking for another cheap.
	streamMap uint64
	codes     *codeRanges
	// located holds what Locate found while the process could be read. A
	// process gone neither moves nor frees its code: its last samples,
	// read after it exited (up to a drain period later), are located as
	// the same addresses were before, not left without a line.
	located *lru.Cache[locatedKey, located]
}

// Loops implements interp.Instance: V8's frames are not run by a loop of
// native frames.
func (in *instance) Loops() []interp.Range { return nil }

// Detach implements interp.Instance.
func (in *instance) Detach() error {
	in.client.scripts.RemoveFunc(func(k scriptKey, _ *script) bool { return k.attach == in.serial })
	return in.client.cfg.Sink.DeleteV8Proc(uint32(in.pid))
}

// Place implements interp.JIT. A frame whose code is JIT code (an
// anonymous mapping, or one mapped since the process's mappings were
// read: the walk found a V8 frame there) is named by it. In the embedded
// builtins, an
// interpreted frame (its bytecode offset read) is run by them: it
// replaces their frame; another one called a builtin that made no frame
// of its own, and goes rootward of it. Elsewhere the frame is dropped.
func (in *instance) Place(native, f *frame.Frame) interp.Placement {
	m := native.Mapping
	if m == nil {
		return interp.PlaceReplace
	}
	if !m.Executable() {
		return interp.PlaceDrop
	}
	if !m.File() {
		return interp.PlaceReplace
	}
	if m.Key() != in.File || !in.blob.Contains(m.FileOffset(native.Address)) {
		return interp.PlaceDrop
	}
	f.Native = 0
	if f.Offset == frame.NoOffset {
		return interp.PlaceCaller
	}
	// The frame's bytecode offset counts from the BytecodeArray's tagged
	// address.
	header := in.heap.l.bytecodeData - 1
	if uint64(f.Offset) < header {
		f.Offset = frame.NoOffset
	} else {
		f.Offset -= uint32(header)
	}
	return interp.PlaceReplace
}

// Locate implements interp.JIT: the Code object whose instructions hold
// the frame's machine code address, and the offset there; the frame's
// function without a line when no code holds it. Once the process is
// gone, what the same frame gave while it ran.
func (in *instance) Locate(f *frame.Frame) (uint64, uint32, error) {
	k := locatedKey{native: f.Native, fn: f.Address}
	addr, off, err := in.locate(f)
	if errors.Is(err, syscall.ESRCH) {
		if l, ok := in.located.Get(k); ok {
			return l.addr, l.off, nil
		}
	}
	if err != nil {
		return f.Address, frame.NoOffset, nil
	}
	in.located.Add(k, located{addr: addr, off: off})
	return addr, off, nil
}

// locate is Locate while the process can be read; an error says its
// memory could not be.
func (in *instance) locate(f *frame.Frame) (uint64, uint32, error) {
	c, err := in.code(f.Native)
	switch {
	case err != nil:
		return 0, 0, err
	case c.kind == in.heap.l.codeKindBaseline:
		// Baseline code has no function of its own: the frame's, which
		// must be the one whose code it is, named at the bytecode.
		data, err := in.heap.word(f.Address, in.heap.l.sfiFunctionData)
		if err != nil {
			return 0, 0, err
		}
		if data != c.addr {
			return f.Address, frame.NoOffset, nil
		}
		off, err := in.heap.baselineOffset(c, f.Native)
		if err != nil {
			return 0, 0, err
		}
		return f.Address, off, nil
	}
	// Optimized code belongs to the frame's function (the outermost of
	// those inlined): other code at the address is some other frame's,
	// whose return address was taken for this one's.
	sfi, err := in.heap.codeFunction(c)
	if err != nil {
		return 0, 0, err
	}
	if sfi != f.Address {
		return f.Address, frame.NoOffset, nil
	}
	return c.addr, uint32(f.Native - c.start), nil
}

// code returns the Code object whose instructions hold pc.
func (in *instance) code(pc uint64) (*codeHeader, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if r, ok := in.codes.find(pc); ok {
		if c, _, err := in.heap.streamOf(r.start); err == nil && c.addr == r.code {
			return c, nil
		}
		in.codes.remove(r.start)
	}
	c, smap, err := in.heap.findCode(pc, in.streamMap)
	if err != nil {
		return nil, err
	}
	in.streamMap = smap
	in.codes.add(codeRange{start: c.start, end: c.start + c.size, code: c.addr})
	return c, nil
}

// Identity implements interp.Instance.
func (in *instance) Identity(addr uint64) ([]byte, error) {
	_, id, err := in.identity(addr)
	return id, err
}

// identity reads the type of the object at addr, and what tells it from
// another object later allocated there.
func (in *instance) identity(addr uint64) (uint16, []byte, error) {
	h := &in.heap
	t, err := h.typeOf(addr)
	if err != nil {
		return 0, nil, err
	}
	switch t {
	case h.l.typeSFI:
		words, err := h.functionIdent(addr)
		if err != nil {
			return 0, nil, err
		}
		id := make([]byte, 0, 8*len(words))
		for _, w := range words {
			id = appendU64(id, w)
		}
		return t, id, nil
	case h.l.typeCode:
		c, err := h.readCodeHeader(addr)
		if err != nil {
			return 0, nil, err
		}
		return t, c.raw, nil
	}
	return 0, nil, fmt.Errorf("%#x: type %d, neither a function nor code: %w", addr, t, errWrongType)
}

// Object implements interp.Instance: a SharedFunctionInfo, named with
// its bytecode's positions, or a Code object, named with its machine
// code's.
func (in *instance) Object(addr uint64) (*interp.Object, error) {
	t, id, err := in.identity(addr)
	if err != nil {
		return nil, err
	}
	var tab *table
	var own fn
	if t == in.heap.l.typeSFI {
		tab, own, err = in.functionTable(addr)
	} else {
		tab, own, err = in.codeTable(addr)
	}
	if err != nil {
		return nil, err
	}
	obj := &interp.Object{Name: own.name, File: own.file, Identity: id}
	obj.Bytes = int64(len(id) + len(own.name) + len(own.file) + 64)
	if tab != nil {
		obj.Inlines = tab
		obj.Bytes += tab.bytes()
	}
	return obj, nil
}

func appendU64(b []byte, v uint64) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}
