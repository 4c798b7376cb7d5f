package debugfiles

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/bpfcol/bpfcol/internal/safefs"
)

// procRootPath splits /proc/PID/root/REST.
var procRootPath = regexp.MustCompile(`^(/proc/[0-9]+/root)/(.+)$`)

// openLocal opens a debug file candidate, resolving its path beneath the
// directory it belongs to so that no link planted there leads elsewhere:
//   - in the cache, no link at all, and a link or foreign file is removed;
//   - in SystemDebugDir or a DebugDirectories entry, links only while they
//     stay inside that directory;
//   - in a process's root (/proc/PID/root/...), links resolve against that
//     root, as for the process, and never leave it.
//
// Only regular files are opened.
func (f *Finder) openLocal(path string) (*os.File, error) {
	if f.cache != nil {
		if id, ok := f.cache.BuildID(path); ok {
			return f.cache.Open(id)
		}
	}
	for _, d := range append([]string{f.cfg.SystemDebugDir}, f.cfg.DebugDirectories...) {
		if rel, ok := strings.CutPrefix(path, filepath.Clean(d)+string(filepath.Separator)); ok {
			return openBeneath(safefs.OpenTree, d, rel)
		}
	}
	if m := procRootPath.FindStringSubmatch(path); m != nil {
		return openBeneath(safefs.OpenRoot, m[1], m[2])
	}
	// A binary's own directory outside any process's root.
	return openBeneath(safefs.OpenRoot, "/", strings.TrimPrefix(path, "/"))
}

func openBeneath(open func(string) (*safefs.Dir, error), dir, rel string) (*os.File, error) {
	d, err := open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Open(filepath.Clean(rel))
}

// CacheCorrupt counts the links and foreign files removed from the cache.
func (f *Finder) CacheCorrupt() int64 {
	if f.cache == nil {
		return 0
	}
	return f.cache.Corrupt()
}

// Discard drops the debug file at path, found unusable, from the cache
// when it is the cache's: a fetch may get a good one.
func (f *Finder) Discard(path, buildID string) {
	if f.cache != nil && strings.HasPrefix(path, f.cache.Dir()+string(filepath.Separator)) {
		f.cache.Remove(buildID)
	}
}
