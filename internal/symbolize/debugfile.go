package symbolize

import (
	"errors"
	"fmt"
	"os"

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
	if !debuginfod.ValidBuildID(buildID) || len(buildID) < 4 {
		return nil, false, fmt.Errorf("opening debug file of %q: %w", buildID, debuginfod.ErrInvalidBuildID)
	}
	for _, p := range s.localCandidates(buildID) {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			f.Close()
			continue
		}
		return f, false, nil
	}
	if s.startFetch(buildID) {
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("opening debug file of %s: %w", buildID, ErrNoDebugFile)
}
