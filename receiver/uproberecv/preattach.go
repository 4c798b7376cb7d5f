package uproberecv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/internal/dirwatch"
	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/safefs"
)

// pinBinaries attaches every binary a binary: probe names, by path,
// whether or not a process runs it: uprobes live on the inode, so each
// later exec is covered from its first instruction. A path that does not
// exist yet is logged once and attached when written there (see
// watchedDirs) or when a process maps it.
func (t *tracker) pinBinaries() {
	done := map[string]bool{}
	for i := range t.probes {
		path := t.probes[i].cfg.Binary
		if path == "" || done[path] {
			continue
		}
		done[path] = true
		// Without blocking: a FIFO at the path must not stall the start.
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			// A path that does not exist was warned about at start,
			// with its probe (Config.logMissingBinaries).
			level := t.logger.Warn
			if errors.Is(err, fs.ErrNotExist) {
				level = t.logger.Debug
			}
			level("binary to probe is not there: it is attached when written there or when a process maps it", zap.String("path", path), zap.Error(err))
			continue
		}
		fi, err := f.Stat()
		var file process.FileID
		if err == nil {
			file, err = process.StatFile(f)
		}
		f.Close()
		if err != nil {
			t.logger.Warn("binary to probe cannot be stated: it is attached when a process maps it", zap.String("path", path), zap.Error(err))
			continue
		}
		if !fi.Mode().IsRegular() {
			// Warned about at start, with its probe: a directory or a
			// device has nothing to read.
			continue
		}
		var matched []*compiledProbe
		for j := range t.probes {
			// The pid filter is the BPF side's: the uprobes are on the
			// inode for every process.
			if t.probes[j].matchesPath(path) {
				matched = append(matched, &t.probes[j])
			}
		}
		tg := &target{path: path, attachPath: path, file: file, open: func() (*os.File, error) { return openSame(path, file) }}
		t.attachTo(0, tg, matched, 0, "")
	}
}

// libraryDirs are where the dynamic loader finds libraries by default:
// their files that a file_match probe matches are attached at start, so a
// library loaded later (dlopen, Python extension modules) is covered from
// its first instruction without waiting for its mapping to be seen.
// Both architectures' multiarch directories are listed: the other's is
// absent or holds no library the loader would map.
var libraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"}

const (
	// maxDirEntries bounds the entries read from one directory at start.
	maxDirEntries = 20000
	// maxWatchedDirs bounds the directories watched for files written
	// into them.
	maxWatchedDirs = 64
	// maxWatchPending bounds the written files waiting to be attached;
	// more are counted and left to the exec path.
	maxWatchPending = 1024
)

// retaining reports whether binaries without processes are kept attached:
// only then is attaching a file before anything runs it of use.
func (t *tracker) retaining() bool {
	return t.opts.retain.MaxBinaries > 0 && t.opts.retain.MaxAge > 0
}

// preattachable returns the probes that attach a file by its path alone:
// binary: ones naming it (their pids are the BPF side's filter, as in
// pinBinaries), and file_match ones without pids (a pid list matches per
// process).
func (t *tracker) preattachable(path string) []*compiledProbe {
	var matched []*compiledProbe
	for j := range t.probes {
		p := &t.probes[j]
		if p.cfg.Binary == path || (p.match != nil && p.pids == nil && t.retaining() && p.match.MatchString(path)) {
			matched = append(matched, p)
		}
	}
	return matched
}

// fileMatchDirs returns the directories anchored file_match regexes name
// literally (see literalDir), where files are attached at start and when
// written, before anything runs them; others keep the exec path.
func (t *tracker) fileMatchDirs() []string {
	if !t.retaining() {
		return nil
	}
	var dirs []string
	for i := range t.probes {
		p := &t.probes[i]
		if p.match == nil || p.pids != nil {
			continue
		}
		if d, ok := literalDir(p.cfg.FileMatch); ok && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// watchedDirs returns the directories watched for files written into
// them: those of fileMatchDirs, and those holding a binary: probe's file,
// so that a new version installed there is attached before it runs.
func (t *tracker) watchedDirs() []string {
	dirs := t.fileMatchDirs()
	for i := range t.probes {
		if path := t.probes[i].cfg.Binary; filepath.IsAbs(path) {
			if d := filepath.Dir(path); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// preattachCandidates attaches, at start, the files on disk a file_match
// probe matches: those in the loader's default directories, and those in
// the directories of watchedDirs. Each listing is bounded (maxDirEntries,
// not recursive), and the whole by retain.max_binaries files; like
// retained binaries they are kept until they change or retention evicts
// them.
func (t *tracker) preattachCandidates() {
	if !t.retaining() {
		return
	}
	wanted := false
	for i := range t.probes {
		if p := &t.probes[i]; p.match != nil && p.pids == nil {
			wanted = true
		}
	}
	if !wanted {
		return
	}
	ordered := t.fileMatchDirs()
	for _, d := range libraryDirs {
		if !slices.Contains(ordered, d) {
			ordered = append(ordered, d)
		}
	}
	attached := 0
	seen := map[process.FileKey]bool{}
	for _, dir := range ordered {
		d, err := safefs.OpenNoLinks(dir)
		if err != nil {
			continue
		}
		names, truncated, _ := d.ReadNames(maxDirEntries)
		if truncated {
			t.logger.Info("directory has more entries than are read at start: the others are attached when they run",
				zap.String("dir", dir), zap.Int("read", maxDirEntries))
		}
		for _, name := range names {
			if attached >= t.opts.retain.MaxBinaries {
				t.logger.Info("not attaching more files at start: retain.max_binaries reached", zap.String("dir", dir), zap.Int("limit", t.opts.retain.MaxBinaries))
				d.Close()
				return
			}
			key, _, retained := t.attachFileOf(d, name, true, seen)
			if retained {
				seen[key] = true
				attached++
			}
		}
		d.Close()
	}
}

// attachFileOf attaches the file name in the directory d if a probe
// matches its path and it is a complete regular file (written: its writer
// closed it, or it was moved or linked in). A binary: probe's file is
// pinned, as at start; a file_match one is retained from then on, as a
// binary whose last process exited. Symlinks are never followed: a process
// maps, and /proc/PID/maps shows, the file a link leads to, under its own
// name. fresh reports uprobes attached by this call, retained a binary
// idle from now.
func (t *tracker) attachFileOf(d *safefs.Dir, name string, written bool, skip map[process.FileKey]bool) (key process.FileKey, fresh, retained bool) {
	path := filepath.Join(d.Name(), name)
	matched := t.preattachable(path)
	if len(matched) == 0 {
		return key, false, false
	}
	f, err := d.Open(name)
	if err != nil {
		// A symlink, a FIFO, a directory, or gone.
		return key, false, false
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return key, false, false
	}
	file, known := process.FileIDOf(fi)
	if !known || skip[file.FileKey] {
		return key, false, false
	}
	if !written && process.Links(fi) < 2 {
		// Created and maybe still being written: its close tells.
		return key, false, false
	}
	tg := &target{path: path, attachPath: path, file: file, open: func() (*os.File, error) { return d.Open(name) }}
	before := ktime.MonotonicNanos()
	t.attachTo(0, tg, matched, 0, "")
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.binaries[file.FileKey]
	if b == nil || !b.file.Same(file) {
		return file.FileKey, false, false
	}
	fresh = b.attachedAt >= before
	for _, o := range t.binaries {
		if o != b && o.path == path && len(o.holders) == 0 && !o.pinned {
			// Replaced at its path (a new version moved over it): the
			// old inode runs no more processes from there.
			t.detachLocked(o, "replaced at its path", false)
		}
	}
	if written && b.path != path && !b.pinned {
		// Moved here from a temporary name (an installer's): named by
		// where it is now, so that its own replacement is seen.
		b.path = path
	}
	if len(b.holders) > 0 || b.pinned || !b.idleSince.IsZero() {
		return file.FileKey, fresh, false
	}
	// Held by nobody: retained from now, within retain's bounds.
	t.idleLocked(b, t.opts.now())
	return file.FileKey, fresh, true
}

// written handles a change in a watched directory: a file written, moved
// or linked in is attached before anything runs it.
func (t *tracker) written(c dirwatch.Change) {
	if _, fresh, _ := t.attachFileOf(c.Dir, c.Name, c.Written, nil); fresh {
		t.stats.attachedOnWrite.Add(1)
	}
}

// scanAll scans every process in /proc.
func (t *tracker) scanAll() error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("listing /proc: %w", err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		t.scan(pid, 0, "")
	}
	return nil
}
