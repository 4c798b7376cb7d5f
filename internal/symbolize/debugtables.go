package symbolize

import (
	"errors"
	"os"
	"sync"

	"github.com/bpfcol/bpfcol/internal/lru"
	"github.com/bpfcol/bpfcol/internal/process"
)

// debugTables holds parsed debug files under a byte budget. Evicted files
// are closed once their last reader releases them.
type debugTables struct {
	mu  sync.Mutex // makes a lookup and the add after it one step
	lru *lru.Cache[string, *Binary]
}

func newDebugTables(maxBytes int64) *debugTables {
	// A table larger than the whole budget is still held, alone: parsing
	// it again for every lookup would cost more than the memory.
	t := &debugTables{lru: lru.New(maxBytes, func(_ string, b *Binary) int64 { return min(b.MemSize(), maxBytes) })}
	t.lru.OnEvict(func(_ string, b *Binary) { b.Close() })
	return t
}

// get returns key's Binary with a reference the caller releases, nil if
// it is not held.
func (t *debugTables) get(key string) *Binary {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.getLocked(key)
}

func (t *debugTables) getLocked(key string) *Binary {
	b, ok := t.lru.Get(key)
	if !ok {
		return nil
	}
	b.acquire()
	return b
}

// add keeps b, whose opener's reference it takes over, under key, and
// returns the held Binary with a reference for the caller: b, or the one
// another lookup added first.
func (t *debugTables) add(key string, b *Binary) *Binary {
	t.mu.Lock()
	defer t.mu.Unlock()
	if held := t.getLocked(key); held != nil {
		b.Close()
		return held
	}
	b.acquire()
	t.lru.Add(key, b)
	return b
}

func (t *debugTables) stats() lru.Stats { return t.lru.Stats() }

func (t *debugTables) closeAll() error {
	var errs []error
	t.lru.RemoveFunc(func(_ string, b *Binary) bool {
		errs = append(errs, b.Close())
		return true
	})
	return errors.Join(errs...)
}

// openDebug validates and parses the candidate debug file f, and keeps it
// in the tables under key. It takes ownership of f. A candidate that fails
// is marked bad by its (dev, inode, size, mtime), so the next candidate is
// tried and a good sibling copy is never blocked.
func (s *Symbolizer) openDebug(key string, f *os.File, matches func(*Binary) bool) *Binary {
	path := f.Name()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil
	}
	id, haveID := process.FileIDOf(fi)
	if haveID && s.badDebug.Contains(id) {
		s.stats.negativeHits.Add(1)
		f.Close()
		return nil
	}
	bad := func() *Binary {
		s.stats.parseFailures.Add(1)
		if haveID {
			s.badDebug.Add(id)
		}
		s.files.Discard(path, key)
		return nil
	}
	b, err := OpenBinary(f, s.cfg.Tables)
	if err != nil {
		return bad()
	}
	if !matches(b) || (!b.HasDWARF() && !b.HasSymtab()) {
		b.Close()
		return bad()
	}
	if b.HasDWARF() && b.DWARFErr() != nil {
		b.Close()
		return bad()
	}
	if b.HasSymtab() && b.SymbolsErr() != nil && !b.HasDWARF() {
		b.Close()
		return bad()
	}
	b.loadSymbols()
	s.stats.localHits.Add(1)
	return s.tables.add(key, b)
}

// debugFile returns the parsed debug file of buildID, looking on disk in
// order (system dir, configured dirs, the cache) and otherwise starting a
// background fetch, in which case pending is true.
func (s *Symbolizer) debugFile(buildID string) (dbg *Binary, pending bool) {
	if dbg := s.tables.get(buildID); dbg != nil {
		return dbg, false
	}
	for f := range s.files.Local(buildID) {
		if dbg := s.openDebug(buildID, f, func(b *Binary) bool { return b.BuildIDGNU() == buildID }); dbg != nil {
			return dbg, false
		}
	}
	s.files.NoneLocal(buildID)
	return nil, s.files.Fetch(buildID)
}

// resolveDebugLink follows bin's .gnu_debuglink where debugfiles looks
// for it; the target's CRC32 must match. It returns the key the debug
// file is held under.
func (s *Symbolizer) resolveDebugLink(ref MappingRef, bin *Binary) (string, bool) {
	name, crc, ok := bin.DebugLink()
	if !ok {
		return "", false
	}
	for _, c := range s.files.LinkCandidates(ref.Path, ref.PID, name) {
		if dbg := s.tables.get(c.Key); dbg != nil {
			dbg.Release()
			return c.Key, true
		}
		f, ok := s.files.OpenLink(c, crc)
		if !ok {
			continue
		}
		if dbg := s.openDebug(c.Key, f, func(*Binary) bool { return true }); dbg != nil {
			dbg.Release()
			return c.Key, true
		}
	}
	return "", false
}
