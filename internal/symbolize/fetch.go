package symbolize

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
)

// debugFile returns the parsed debug file of buildID, looking on disk in
// order (system dir, configured dirs, the cache) and otherwise starting a
// background fetch, in which case pending is true.
func (s *Symbolizer) debugFile(buildID string) (dbg *Binary, pending bool) {
	if dbg := s.tables.get(buildID); dbg != nil {
		return dbg, false
	}
	if !s.noLocalDebug.Contains(buildID) {
		for f := range s.localDebugFiles(buildID) {
			if dbg := s.openDebug(buildID, f, func(b *Binary) bool { return b.BuildIDGNU() == buildID }); dbg != nil {
				return dbg, false
			}
		}
		s.noLocalDebug.Add(buildID)
	}
	return nil, s.startFetch(buildID)
}

func (s *Symbolizer) localCandidates(buildID string) []string {
	rel := filepath.Join(".build-id", buildID[:2], buildID[2:]+".debug")
	paths := []string{filepath.Join(s.cfg.SystemDebugDir, rel)}
	for _, d := range s.cfg.DebugDirectories {
		paths = append(paths, filepath.Join(d, rel))
	}
	if s.cache != nil {
		if p, ok := s.cache.Lookup(buildID); ok {
			paths = append(paths, p)
		}
	}
	return paths
}

// startFetch starts fetching buildID unless a fetch is running, failed
// recently, or fetching is off. It reports whether a fetch is running.
func (s *Symbolizer) startFetch(buildID string) bool {
	if s.cache == nil || !s.client.Enabled() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.pending[buildID] {
		return true
	}
	if s.failedFetch.Contains(buildID) {
		s.stats.negativeHits.Add(1)
		return false
	}
	s.pending[buildID] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		res, err := s.client.Fetch(s.ctx, buildID, s.cache, validateDebugFile(buildID))
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.pending, buildID)
		// Every byte received counts, a rejected download's too.
		s.stats.fetchByte.Add(res.Bytes)
		if err != nil {
			if errors.Is(err, debuginfod.ErrInvalid) {
				s.stats.parseFailures.Add(1)
			} else {
				s.stats.fetchFailures.Add(1)
			}
			s.failedFetch.Add(buildID)
			s.logFetchFailure(buildID, err)
			return
		}
		s.stats.fetches.Add(1)
		// Now in the cache: the next lookup opens it.
		s.noLocalDebug.Remove(buildID)
	}()
	return true
}

// logFetchFailure warns of a failed fetch, so that a server that cannot be
// reached or sends garbage shows in the log and not only in the metrics.
// A file no server has is not a fault. Called with s.mu held.
func (s *Symbolizer) logFetchFailure(buildID string, err error) {
	if errors.Is(err, debuginfod.ErrNotFound) || errors.Is(err, context.Canceled) {
		return
	}
	now := time.Now()
	if !s.fetchLoggedAt.IsZero() && now.Sub(s.fetchLoggedAt) < fetchFailureLogInterval {
		s.fetchUnlogged++
		return
	}
	s.cfg.Logger.Warn("debug info not fetched from debuginfod: this binary's frames stay unnamed while the failure is remembered",
		zap.String("build_id", buildID),
		// Strings: the collector's encoder writes durations as bare seconds.
		zap.Stringer("retried_after", s.cfg.NegativeTTL),
		zap.Int("failures_not_logged_since_last", s.fetchUnlogged),
		zap.Stringer("next_warning_after", fetchFailureLogInterval),
		zap.Error(err))
	s.fetchLoggedAt, s.fetchUnlogged = now, 0
}

// FetchingConfigured reports whether debuginfod servers are configured,
// from the config or the environment, whether or not a cache directory
// lets them be used.
func (s *Symbolizer) FetchingConfigured() bool { return s.client.Enabled() }

// FetchFailed reports whether buildID is in the failed-fetch negative cache.
func (s *Symbolizer) FetchFailed(buildID string) bool {
	return s.failedFetch.Contains(buildID)
}

// FetchPending reports whether buildID is being fetched.
func (s *Symbolizer) FetchPending(buildID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[buildID]
}

// validateDebugFile accepts a download only if it is an ELF file carrying
// buildID and some symbols or DWARF.
func validateDebugFile(buildID string) debuginfod.Validator {
	return func(f *os.File) error {
		ef, err := elf.NewFile(f)
		if err != nil {
			return fmt.Errorf("parsing ELF: %w", err)
		}
		if got := elfbin.ReadBuildIDs(ef, f).GNU; got != buildID {
			return fmt.Errorf("build-id is %q, want %q", got, buildID)
		}
		if ef.Section(".debug_info") == nil && ef.Section(".zdebug_info") == nil && ef.Section(".symtab") == nil {
			return errors.New("no DWARF and no symbol table")
		}
		return nil
	}
}
