package pprofexporter

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// File names in the directory. Per-export names embed a fixed-width UTC
// time, so sorting them by name sorts them by age.
const (
	latestName   = "latest.pb.gz"
	exportPrefix = "profile-"
	exportSuffix = ".pb.gz"
	exportTime   = "20060102T150405.000000000Z"
	tempPattern  = ".tmp-*"
)

// fileStore writes encoded profiles to a directory and keeps at most
// maxFiles of them. It is safe for concurrent use.
type fileStore struct {
	dir      string
	maxFiles int
	now      func() time.Time

	mu   sync.Mutex
	last time.Time
}

func newFileStore(dir string, maxFiles int) *fileStore {
	return &fileStore{dir: dir, maxFiles: maxFiles, now: time.Now}
}

// open creates the directory and applies rotation to files an earlier run
// left behind.
func (s *fileStore) open() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("creating the profiles directory: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rotate()
}

// write stores data as a new per-export file and as latest.pb.gz, and
// returns the new file's path.
func (s *fileStore) write(data []byte) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Two exports within the clock's resolution must not share a name.
	t := s.now().UTC()
	if !t.After(s.last) {
		t = s.last.Add(time.Nanosecond)
	}
	s.last = t
	path := filepath.Join(s.dir, exportPrefix+t.Format(exportTime)+exportSuffix)
	if err := s.replace(path, data); err != nil {
		return "", err
	}
	if err := s.replace(filepath.Join(s.dir, latestName), data); err != nil {
		return "", err
	}
	return path, s.rotate()
}

// replace writes data to a temporary file and renames it over path, so a
// reader sees either the old or the new file, never a partial one. No fsync:
// readers only need the atomic rename, and a crash loses one interval.
func (s *fileStore) replace(path string, data []byte) error {
	f, err := os.CreateTemp(s.dir, tempPattern)
	if err != nil {
		return fmt.Errorf("creating a temporary file: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		// CreateTemp makes the file 0600; the collector often runs as
		// root while the user opening the flame graph does not.
		werr = os.Chmod(tmp, 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, werr)
	}
	return nil
}

// rotate removes the oldest per-export files beyond maxFiles. Other files in
// the directory are never touched.
func (s *fileStore) rotate() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("listing the profiles directory: %w", err)
	}
	var exports []string
	for _, e := range entries {
		name := e.Name()
		if e.Type().IsRegular() && strings.HasPrefix(name, exportPrefix) && strings.HasSuffix(name, exportSuffix) {
			exports = append(exports, name)
		}
	}
	if len(exports) <= s.maxFiles {
		return nil
	}
	slices.Sort(exports)
	for _, name := range exports[:len(exports)-s.maxFiles] {
		if err := os.Remove(filepath.Join(s.dir, name)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing an old profile: %w", err)
		}
	}
	return nil
}
