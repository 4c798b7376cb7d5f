// Package perfmap names JIT-compiled code from the /tmp/perf-PID.map files
// that runtimes write for perf: Node with --perf-basic-prof, Python 3.12+
// with -X perf, JVM perf-map agents. Each line is "START SIZE NAME" in hex.
//
// A file is read through the process's root (so a container's /tmp is
// found), incrementally: each refresh reads only what was appended since
// the last one. Everything held is bounded.
package perfmap

import (
	"bufio"
	"bytes"
	"io"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Limits on what one file contributes.
const (
	// maxSymbolsPerProcess bounds the symbols kept for one process.
	maxSymbolsPerProcess = 1 << 18
	// maxReadPerRefresh bounds the bytes read from one file at once.
	maxReadPerRefresh = 16 << 20
	// maxLine bounds one line; longer lines are skipped.
	maxLine = 4096
)

// Symbol is one JIT-compiled function.
type Symbol struct {
	Start, Size uint64
	Name        string
}

// Stats are a Cache's counts.
type Stats struct {
	// Processes and Symbols held now.
	Processes, Symbols int
	// Dropped counts symbols not kept because a process hit its bound.
	Dropped int64
}

type processMap struct {
	offset  int64    // bytes consumed so far
	symbols []Symbol // sorted by Start; a later line for a Start wins
	start   string   // process start time: tells a reused pid apart
	readAt  time.Time
}

// Cache holds the perf maps of up to a bounded number of processes. It is
// safe for concurrent use.
type Cache struct {
	mu       sync.Mutex
	max      int
	interval time.Duration
	procs    map[int]*processMap
	dropped  int64
	// open opens pid's perf map from offset; a variable for tests.
	open func(pid int) (io.ReadSeekCloser, string, error)
}

// New returns a cache for up to maxProcesses processes, each file re-read
// for appended lines at most once per refresh interval.
func New(maxProcesses int, refresh time.Duration) *Cache {
	return &Cache{max: max(maxProcesses, 1), interval: refresh, procs: map[int]*processMap{}, open: openPerfMap}
}

// Lookup returns the name of the JIT function holding addr in process pid.
func (c *Cache) Lookup(pid int, addr uint64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.refresh(pid)
	if p == nil {
		return "", false
	}
	i := sort.Search(len(p.symbols), func(i int) bool { return p.symbols[i].Start > addr }) - 1
	if i < 0 {
		return "", false
	}
	s := p.symbols[i]
	if addr >= s.Start+max(s.Size, 1) {
		return "", false
	}
	return s.Name, true
}

// Stats returns the cache's counts.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Processes: len(c.procs), Dropped: c.dropped}
	for _, p := range c.procs {
		st.Symbols += len(p.symbols)
	}
	return st
}

func (c *Cache) refresh(pid int) *processMap {
	p := c.procs[pid]
	if p != nil && time.Since(p.readAt) < c.interval {
		return p
	}
	f, start, err := c.open(pid)
	if err != nil {
		// Gone, or no map written: keep what was read, and do not try
		// again before the interval passed.
		if p == nil {
			p = c.add(pid, "")
		}
		p.readAt = time.Now()
		return p
	}
	defer f.Close()
	if p == nil || p.start != start {
		p = c.add(pid, start)
	}
	p.readAt = time.Now()
	if _, err := f.Seek(p.offset, io.SeekStart); err != nil {
		return p
	}
	added, n := c.parse(p, io.LimitReader(f, maxReadPerRefresh))
	p.offset += n
	if added {
		// Stable: among equal starts the line read last ends up last,
		// and the dedup below keeps it.
		sort.SliceStable(p.symbols, func(i, j int) bool { return p.symbols[i].Start < p.symbols[j].Start })
		out := p.symbols[:0]
		for i, s := range p.symbols {
			if i+1 < len(p.symbols) && p.symbols[i+1].Start == s.Start {
				continue
			}
			out = append(out, s)
		}
		p.symbols = out
	}
	return p
}

func (c *Cache) add(pid int, start string) *processMap {
	if _, ok := c.procs[pid]; !ok && len(c.procs) >= c.max {
		for k := range c.procs { // any: bounded, not ordered
			delete(c.procs, k)
			break
		}
	}
	p := &processMap{start: start}
	c.procs[pid] = p
	return p
}

// parse reads complete lines and returns whether symbols were added and
// how many bytes were consumed; a trailing partial line is left for the
// next refresh.
func (c *Cache) parse(p *processMap, r io.Reader) (bool, int64) {
	br := bufio.NewReaderSize(r, 64<<10)
	var consumed int64
	added := false
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Skip an overlong line whole.
			consumed += int64(len(line))
			for err == bufio.ErrBufferFull {
				line, err = br.ReadSlice('\n')
				consumed += int64(len(line))
			}
			continue
		}
		if err != nil {
			return added, consumed // io.EOF: a partial line stays unread
		}
		consumed += int64(len(line))
		if len(line) > maxLine {
			continue
		}
		s, ok := parseLine(line)
		if !ok {
			continue
		}
		if len(p.symbols) >= maxSymbolsPerProcess {
			c.dropped++
			continue
		}
		p.symbols = append(p.symbols, s)
		added = true
	}
}

// parseLine parses "START SIZE NAME" (hex, with or without 0x).
func parseLine(line []byte) (Symbol, bool) {
	line = bytes.TrimRight(line, "\r\n")
	startField, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return Symbol{}, false
	}
	sizeField, name, ok := bytes.Cut(rest, []byte(" "))
	if !ok || len(name) == 0 {
		return Symbol{}, false
	}
	start, err1 := strconv.ParseUint(string(bytes.TrimPrefix(startField, []byte("0x"))), 16, 64)
	size, err2 := strconv.ParseUint(string(bytes.TrimPrefix(sizeField, []byte("0x"))), 16, 64)
	if err1 != nil || err2 != nil {
		return Symbol{}, false
	}
	return Symbol{Start: start, Size: size, Name: string(name)}, true
}
