// Package python follows CPython 3.6-3.13 processes: it recognises the
// file the interpreter lives in (libpython3.X.so or a static python3.X),
// reads from it, once per file, where the version keeps what the BPF walk
// reads (internal/bpf/c/include/bpfcol_python.h), writes that per process
// into the sampler, and names frames from their code objects in the
// process's memory.
package python

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"sync"
	"sync/atomic"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
	"github.com/bpfcol/bpfcol/internal/interp/threadlocal"
	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

// Name is the interpreter's name in the receiver's settings.
const Name = "cpython"

// Sink is where a process's layout goes: the sampler.
type Sink interface {
	SetPythonProc(pid uint32, p profiler.PythonProc) error
	DeletePythonProc(pid uint32) error
}

// Config configures the client.
type Config struct {
	Sink Sink
	// ReadFailures counts the reads of processes' memory that failed.
	ReadFailures *atomic.Int64
	// MaxFiles bounds the files whose analysis is kept; zero means 256.
	MaxFiles int
}

// Client is the CPython client.
type Client struct {
	cfg Config
	// files caches, by file, what a file is: CPython of a version (or
	// not), libc's TSD layout, ld.so's DTV layout.
	files *lru.Cache[process.FileKey, *fileFacts]
	mu    sync.Mutex // one analysis of a file at a time
}

// fileFacts is what one mapped file tells.
type fileFacts struct {
	python *binaryInfo
	err    error // why the file cannot be followed
	tsd    *profiler.TSDLayout
	dtv    *threadlocal.DTV
}

// New returns the client.
func New(cfg Config) *Client {
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 256
	}
	return &Client{cfg: cfg, files: lru.New[process.FileKey, *fileFacts](int64(cfg.MaxFiles), nil)}
}

var _ interp.Client = (*Client)(nil)

// Name implements interp.Client.
func (c *Client) Name() string { return Name }

// Type implements interp.Client.
func (c *Client) Type() frame.Type { return frame.CPython }

// file kinds looked at for a process.
const (
	filePython = iota
	fileLibc
	fileLoader
)

// glibc's libraries, by the names they are mapped with: libpthread
// (pthread_getspecific before glibc 2.34), libc, and the dynamic loader.
const (
	libpthreadName = "libpthread.so.0"
	libcSOName     = "libc.so.6"
)

var loaderName = regexp.MustCompile(`^ld-linux(-x86-64)?\.so\.2$`)

// Attach implements interp.Client.
func (c *Client) Attach(pid int, maps []process.Mapping) (interp.Instance, error) {
	var py, loader *process.Mapping
	var libcs []*process.Mapping // libpthread first
	for i := range maps {
		m := &maps[i]
		if !m.File() || !m.Executable() {
			continue
		}
		base := path.Base(m.Path)
		switch {
		case Candidate(m.Path):
			f := c.facts(pid, m, filePython)
			if f.python != nil || f.err != nil && !errors.Is(f.err, errNotInterpreter) {
				py = m
			}
		case base == libpthreadName:
			libcs = append([]*process.Mapping{m}, libcs...)
		case base == libcSOName:
			libcs = append(libcs, m)
		case loaderName.MatchString(base):
			loader = m
		}
	}
	if py == nil {
		return nil, nil
	}
	facts := c.facts(pid, py, filePython)
	if facts.err != nil {
		if errors.Is(facts.err, ErrUnsupportedVersion) {
			return nil, fmt.Errorf("%s: %w: %w", py.Path, interp.ErrUnsupported, facts.err)
		}
		return nil, fmt.Errorf("%s: %w", py.Path, facts.err)
	}
	info := facts.python
	bias, ok := info.loadBias(py.Start, py.Offset)
	if !ok {
		return nil, fmt.Errorf("%s: mapping at %#x is not an executable segment", py.Path, py.Start)
	}
	mem := interp.Memory{PID: pid, Failures: c.cfg.ReadFailures}
	walk := info.layout.walk
	if info.tssKey != 0 {
		// The pthread key: the way to 3.12's thread states, and 3.13's
		// while a thread runs without the GIL.
		tsd, err := c.tsd(pid, libcs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", py.Path, err)
		}
		walk.TState, walk.TSSKey, walk.TSSInitialized, walk.TSD = profiler.PythonTSD, info.tssKey+bias, info.tssInitialized, *tsd
	}
	if info.tls.kind != tlsNone {
		var dtv *threadlocal.DTV
		if info.tls.kind == tlsGD {
			if loader == nil {
				return nil, fmt.Errorf("%s: no dynamic loader mapped to find its thread-locals with", py.Path)
			}
			lf := c.facts(pid, loader, fileLoader)
			if lf.err != nil {
				return nil, fmt.Errorf("%s: %w", loader.Path, lf.err)
			}
			dtv = lf.dtv
		}
		if err := info.tls.resolve(&walk, mem, bias, dtv); err != nil {
			return nil, fmt.Errorf("%s: %w", py.Path, err)
		}
	}
	if walk.TState == 0 {
		return nil, fmt.Errorf("%s: no way to a thread's thread state", py.Path)
	}
	if err := c.cfg.Sink.SetPythonProc(uint32(pid), walk); err != nil {
		return nil, err
	}
	loops := make([]interp.Range, len(info.loops))
	for i, r := range info.loops {
		loops[i] = interp.Range{Start: r.Start + bias, End: r.End + bias}
	}
	return &instance{
		pid:        pid,
		sink:       c.cfg.Sink,
		MappedFile: interp.MappedFileOf(py),
		loops:      loops,
		codeReader: codeReader{
			l:   info.layout,
			mem: mem,
			types: objectTypes{
				code:  info.codeType + bias,
				str:   info.strType + bias,
				bytes: info.bytesType + bias,
			},
		},
	}, nil
}

// tsd returns the pthread-specific data layout of the first of libcs
// that defines pthread_getspecific.
func (c *Client) tsd(pid int, libcs []*process.Mapping) (*profiler.TSDLayout, error) {
	if len(libcs) == 0 {
		return nil, errors.New("no glibc mapped to read pthread-specific data with")
	}
	var errs []error
	for _, m := range libcs {
		f := c.facts(pid, m, fileLibc)
		if f.tsd != nil {
			return f.tsd, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m.Path, f.err))
	}
	return nil, errors.Join(errs...)
}

// facts returns what the file of m is, analysed once per file.
func (c *Client) facts(pid int, m *process.Mapping, kind int) *fileFacts {
	key := m.Key()
	if f, ok := c.files.Get(key); ok && f.relevant(kind) {
		return f
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.files.Get(key)
	if !ok {
		f = &fileFacts{}
	}
	if f.relevant(kind) {
		return f
	}
	file, err := process.OpenMapping(pid, m)
	if err != nil {
		// Not cached: the next process may open it.
		f.err = err
		return f
	}
	defer file.Close()
	img, err := elfimage.Open(file)
	if err != nil {
		f.err = fmt.Errorf("%s: %w", m.Path, err)
		c.files.Add(key, f)
		return f
	}
	defer func() {
		// A file another user controls must not take the collector
		// down with a decoder's bug.
		if p := recover(); p != nil {
			f.python, f.tsd, f.dtv, f.err = nil, nil, nil, fmt.Errorf("%s: analysis failed: %v", m.Path, p)
			c.files.Add(key, f)
		}
	}()
	switch kind {
	case filePython:
		f.python, f.err = analyze(img, m.Path)
	case fileLibc:
		var l profiler.TSDLayout
		if l, f.err = threadlocal.TSD(img); f.err == nil {
			f.tsd = &l
		}
	case fileLoader:
		var d threadlocal.DTV
		if d, f.err = threadlocal.DTVLayout(img); f.err == nil {
			f.dtv = &d
		}
	}
	c.files.Add(key, f)
	return f
}

// relevant reports whether f already answers for kind.
func (f *fileFacts) relevant(kind int) bool {
	switch kind {
	case filePython:
		return f.python != nil || f.err != nil
	case fileLibc:
		return f.tsd != nil || f.err != nil
	default:
		return f.dtv != nil || f.err != nil
	}
}

// instance is one process running CPython.
type instance struct {
	codeReader
	pid  int
	sink Sink
	// MappedFile is the file it was attached through.
	interp.MappedFile
	loops []interp.Range
}

// Loops implements interp.Instance.
func (in *instance) Loops() []interp.Range { return in.loops }

// Detach implements interp.Instance.
func (in *instance) Detach() error { return in.sink.DeletePythonProc(uint32(in.pid)) }
