package symbolize

import (
	"fmt"
	"os"

	"github.com/bpfcol/bpfcol/internal/symbolize/debugfiles"
)

// ErrNoDebugFile means no debug file of a build ID is on disk and none is
// being fetched.
var ErrNoDebugFile = debugfiles.ErrNoDebugFile

// OpenDebugFile opens the separate debug file of the binary with GNU build
// ID buildID, found where symbolization finds it: SystemDebugDir, the
// DebugDirectories, then the download cache. When none is there, it
// starts a background debuginfod download (if configured) and reports
// pending; a later call finds the download. It is for readers of debug
// files other than the symbolizer, such as unwind tables built from
// .debug_frame. The caller checks the file's build ID and closes it.
func (s *Symbolizer) OpenDebugFile(buildID string) (f *os.File, pending bool, err error) {
	return s.files.Open(buildID)
}

// OpenLocalDebugFile is OpenDebugFile without starting a download: it
// opens the debug file of buildID when it is already on disk. Otherwise
// mayArrive tells whether one can land in the cache later, fetched when
// the symbolizer names the binary's frames: readers that only want a debug
// file if symbolization needs it anyway (unwind tables) ask again then.
func (s *Symbolizer) OpenLocalDebugFile(buildID string) (f *os.File, mayArrive bool, err error) {
	if f, err := s.files.OpenLocal(buildID); f != nil || err != nil {
		return f, false, err
	}
	return nil, s.files.MayArrive(), fmt.Errorf("opening debug file of %s: %w", buildID, ErrNoDebugFile)
}

// FetchingConfigured reports whether debuginfod servers are configured,
// from the config or the environment, whether or not a cache directory
// lets them be used.
func (s *Symbolizer) FetchingConfigured() bool { return s.files.FetchingConfigured() }

// FetchFailed reports whether buildID is in the failed-fetch negative cache.
func (s *Symbolizer) FetchFailed(buildID string) bool { return s.files.FetchFailed(buildID) }

// FetchPending reports whether buildID is being fetched.
func (s *Symbolizer) FetchPending(buildID string) bool { return s.files.FetchPending(buildID) }
