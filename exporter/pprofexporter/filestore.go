package pprofexporter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bpfcol/bpfcol/internal/safefs"
)

// File names in the directory. Per-export names embed a fixed-width UTC
// time, so sorting them by name sorts them by age.
const (
	latestName   = "latest.pb.gz"
	exportPrefix = "profile-"
	exportSuffix = ".pb.gz"
	exportTime   = "20060102T150405.000000000Z"
	tempPrefix   = ".tmp-"
)

// fileStore writes encoded profiles to a directory and keeps at most
// maxFiles of them. It is safe for concurrent use.
//
// Files are created, renamed and removed through the open directory, never
// following a symlink in it: the collector often runs as root, and whoever
// can write in the directory must not redirect it to another file.
type fileStore struct {
	dir      string
	maxFiles int
	now      func() time.Time

	mu   sync.Mutex
	root *safefs.Dir // nil until open
	last time.Time
}

func newFileStore(dir string, maxFiles int) *fileStore {
	return &fileStore{dir: dir, maxFiles: maxFiles, now: time.Now}
}

// open creates the directory and applies rotation to files an earlier run
// left behind. The directory's own path is the operator's and may be a
// link.
func (s *fileStore) open() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("creating the profiles directory: %w", err)
	}
	root, err := safefs.OpenNoLinks(s.dir)
	if err != nil {
		return fmt.Errorf("opening the profiles directory: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil {
		_ = s.root.Close()
	}
	s.root = root
	return s.rotate()
}

// close releases the directory.
func (s *fileStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root == nil {
		return nil
	}
	err := s.root.Close()
	s.root = nil
	return err
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
	if s.root == nil {
		return "", errors.New("writing a profile: the store is not open")
	}
	name := exportPrefix + t.Format(exportTime) + exportSuffix
	if err := s.replace(name, data); err != nil {
		return "", err
	}
	if err := s.replace(latestName, data); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, name), s.rotate()
}

// replace writes data to a temporary file and renames it over name, so a
// reader sees either the old or the new file, never a partial one. No fsync:
// readers only need the atomic rename, and a crash loses one interval.
func (s *fileStore) replace(name string, data []byte) error {
	f, tmp, err := s.root.CreateTemp(".", tempPrefix)
	if err != nil {
		return fmt.Errorf("creating a temporary file: %w", err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		// CreateTemp makes the file 0600; the collector often runs as
		// root while the user opening the flame graph does not. Through
		// the descriptor: the name could be swapped for a link.
		werr = f.Chmod(0o644)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = s.root.Rename(tmp, name)
	}
	if werr != nil {
		_ = s.root.Remove(tmp) // best effort: a leftover .tmp- file is hidden and never rotated
		return fmt.Errorf("writing %s: %w", filepath.Join(s.dir, name), werr)
	}
	return nil
}

// rotate removes the oldest per-export files beyond maxFiles. Other files in
// the directory are never touched.
func (s *fileStore) rotate() error {
	names, err := s.root.ReadDir(".")
	if err != nil {
		return fmt.Errorf("listing the profiles directory: %w", err)
	}
	var exports []string
	for _, name := range names {
		if !strings.HasPrefix(name, exportPrefix) || !strings.HasSuffix(name, exportSuffix) {
			continue
		}
		if fi, err := s.root.Lstat(name); err == nil && fi.Mode.IsRegular() {
			exports = append(exports, name)
		}
	}
	if len(exports) <= s.maxFiles {
		return nil
	}
	slices.Sort(exports)
	for _, name := range exports[:len(exports)-s.maxFiles] {
		if err := s.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing an old profile: %w", err)
		}
	}
	return nil
}
