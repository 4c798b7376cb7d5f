package debugfiles

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

// localCandidates returns the paths buildID's debug file may be at.
func (f *Finder) localCandidates(buildID string) []string {
	rel := filepath.Join(".build-id", buildID[:2], buildID[2:]+".debug")
	paths := []string{filepath.Join(f.cfg.SystemDebugDir, rel)}
	for _, d := range f.cfg.DebugDirectories {
		paths = append(paths, filepath.Join(d, rel))
	}
	if f.cache != nil {
		if p, ok := f.cache.Lookup(buildID); ok {
			paths = append(paths, p)
		}
	}
	return paths
}

// Fetch starts fetching buildID unless a fetch is running, failed
// recently, or fetching is off. It reports whether a fetch is running.
func (f *Finder) Fetch(buildID string) bool {
	if f.cache == nil || !f.client.Enabled() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	if f.pending[buildID] {
		return true
	}
	if f.failedFetch.Contains(buildID) {
		f.stats.negativeHits.Add(1)
		return false
	}
	f.pending[buildID] = true
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		res, err := f.client.Fetch(f.ctx, buildID, f.cache, validateDebugFile(buildID))
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.pending, buildID)
		// Every byte received counts, a rejected download's too.
		f.stats.fetchBytes.Add(res.Bytes)
		if err != nil {
			if errors.Is(err, debuginfod.ErrInvalid) {
				f.stats.invalid.Add(1)
			} else {
				f.stats.fetchFailures.Add(1)
			}
			f.failedFetch.Add(buildID)
			f.logFetchFailure(buildID, err)
			return
		}
		f.stats.fetches.Add(1)
		// Now in the cache: the next lookup opens it.
		f.noLocal.Remove(buildID)
	}()
	return true
}

// logFetchFailure warns of a failed fetch, so that a server that cannot be
// reached or sends garbage shows in the log and not only in the metrics.
// A file no server has is not a fault. Called with f.mu held.
func (f *Finder) logFetchFailure(buildID string, err error) {
	if errors.Is(err, debuginfod.ErrNotFound) || errors.Is(err, context.Canceled) {
		return
	}
	now := time.Now()
	if !f.fetchLoggedAt.IsZero() && now.Sub(f.fetchLoggedAt) < fetchFailureLogInterval {
		f.fetchUnlogged++
		return
	}
	f.cfg.Logger.Warn("debug info not fetched from debuginfod: this binary's frames stay unnamed while the failure is remembered",
		zap.String("build_id", buildID),
		// Strings: the collector's encoder writes durations as bare seconds.
		zap.Stringer("retried_after", f.cfg.NegativeTTL),
		zap.Int("failures_not_logged_since_last", f.fetchUnlogged),
		zap.Stringer("next_warning_after", fetchFailureLogInterval),
		zap.Error(err))
	f.fetchLoggedAt, f.fetchUnlogged = now, 0
}

// FetchingConfigured reports whether debuginfod servers are configured,
// from the config or the environment, whether or not a cache directory
// lets them be used.
func (f *Finder) FetchingConfigured() bool { return f.client.Enabled() }

// FetchFailed reports whether buildID is in the failed-fetch negative cache.
func (f *Finder) FetchFailed(buildID string) bool {
	return f.failedFetch.Contains(buildID)
}

// FetchPending reports whether buildID is being fetched.
func (f *Finder) FetchPending(buildID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending[buildID]
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
