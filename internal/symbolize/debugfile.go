package symbolize

import (
	"errors"
	"fmt"
	"iter"
	"os"

	"github.com/bpfcol/bpfcol/internal/symbolize/buildid"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
)

// ErrNoDebugFile means no debug file of a build ID is on disk and none is
// being fetched.
var ErrNoDebugFile = errors.New("no debug file")

// OpenDebugFile opens the separate debug file of the binary with GNU build
// ID buildID, found where symbolization finds it: SystemDebugDir, the
// DebugDirectories, then the download cache. When none is there, it
// starts a background debuginfod download (if configured) and reports
// pending; a later call finds the download. It is for readers of debug
// files other than the symbolizer, such as unwind tables built from
// .debug_frame. The caller checks the file's build ID and closes it.
func (s *Symbolizer) OpenDebugFile(buildID string) (f *os.File, pending bool, err error) {
	if f, err := s.openLocalDebugFile(buildID); f != nil || err != nil {
		return f, false, err
	}
	if s.startFetch(buildID) {
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("opening debug file of %s: %w", buildID, ErrNoDebugFile)
}

// OpenLocalDebugFile is OpenDebugFile without starting a download: it
// opens the debug file of buildID when it is already on disk. Otherwise
// mayArrive tells whether one can land in the cache later, fetched when
// the symbolizer names the binary's frames: readers that only want a debug
// file if symbolization needs it anyway (unwind tables) ask again then.
func (s *Symbolizer) OpenLocalDebugFile(buildID string) (f *os.File, mayArrive bool, err error) {
	if f, err := s.openLocalDebugFile(buildID); f != nil || err != nil {
		return f, false, err
	}
	return nil, s.cache != nil && s.client.Enabled(), fmt.Errorf("opening debug file of %s: %w", buildID, ErrNoDebugFile)
}

// openLocalDebugFile returns the first regular debug file of buildID on
// disk, nil (and no error) when there is none.
func (s *Symbolizer) openLocalDebugFile(buildID string) (*os.File, error) {
	if !buildid.Valid(buildID) {
		return nil, fmt.Errorf("opening debug file of %q: %w", buildID, debuginfod.ErrInvalidBuildID)
	}
	for f := range s.localDebugFiles(buildID) {
		return f, nil
	}
	return nil, nil
}

// localDebugFiles yields the regular files of buildID's local candidates,
// opened, in order. The loop's body owns each file it is given.
func (s *Symbolizer) localDebugFiles(buildID string) iter.Seq[*os.File] {
	return func(yield func(*os.File) bool) {
		for _, p := range s.localCandidates(buildID) {
			f, err := s.openLocal(p)
			if err != nil {
				continue
			}
			if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
				f.Close()
				continue
			}
			if !yield(f) {
				return
			}
		}
	}
}
