package symbolize

import (
	"fmt"
	"os"

	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
)

// OpenLocalDebugFile is OpenDebugFile without starting a download: it
// opens the debug file of buildID when it is already on disk
// (SystemDebugDir, the DebugDirectories, the download cache). Otherwise
// mayArrive tells whether one can land in the cache later, fetched when
// the symbolizer names the binary's frames: readers that only want a debug
// file if symbolization needs it anyway (unwind tables) ask again then.
func (s *Symbolizer) OpenLocalDebugFile(buildID string) (f *os.File, mayArrive bool, err error) {
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
	return nil, s.cache != nil && s.client.Enabled(), fmt.Errorf("opening debug file of %s: %w", buildID, ErrNoDebugFile)
}
