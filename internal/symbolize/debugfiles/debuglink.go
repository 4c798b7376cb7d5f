package debugfiles

import (
	"debug/elf"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bpfcol/bpfcol/internal/process"
)

// LinkCandidate is a path a binary's .gnu_debuglink may name.
type LinkCandidate struct {
	Path string
	PID  int // whose root Path is in; 0 for the collector's own
	// Key names the debug file found there among those held.
	Key string
}

// LinkCandidates returns where the debug file name, which the binary at
// path (as process pid sees it) links to, may be, in gdb's order: the
// binary's directory, its .debug subdirectory, then the global debug
// directories with the binary's directory appended. None when path is
// not absolute.
func (f *Finder) LinkCandidates(path string, pid int, name string) []LinkCandidate {
	if path == "" || !filepath.IsAbs(path) {
		return nil
	}
	dir := filepath.Dir(path)
	cands := []LinkCandidate{
		// The binary's directories live in the process's mount namespace;
		// the system and configured directories are the collector's own.
		{Path: filepath.Join(dir, name), PID: pid},
		{Path: filepath.Join(dir, ".debug", name), PID: pid},
		{Path: filepath.Join(f.cfg.SystemDebugDir, dir, name)},
	}
	for _, d := range f.cfg.DebugDirectories {
		cands = append(cands, LinkCandidate{Path: filepath.Join(d, dir, name)})
	}
	for i := range cands {
		c := &cands[i]
		c.Key = "debuglink:" + c.Path
		if c.PID > 0 {
			c.Key = "debuglink:" + strconv.Itoa(c.PID) + ":" + c.Path
		}
	}
	return cands
}

// OpenLink opens c when its content has the CRC32 crc, at its start. The
// process's own directories resolve inside its root; the debug
// directories only beneath themselves.
func (f *Finder) OpenLink(c LinkCandidate, crc uint32) (*os.File, bool) {
	var file *os.File
	var err error
	if c.PID > 0 {
		file, err = process.OpenInRoot(c.PID, c.Path)
	} else {
		file, err = f.openLocal(c.Path)
	}
	if err != nil {
		return nil, false
	}
	if !crcMatches(file, crc) {
		file.Close()
		return nil, false
	}
	return file, true
}

// crcMatches reports whether f has the CRC32 (IEEE) crc, and leaves f at its
// start.
func crcMatches(f *os.File, crc uint32) bool {
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false
	}
	return h.Sum32() == crc
}

// ReadDebugLink returns the file name and CRC32 of ef's .gnu_debuglink
// section.
func ReadDebugLink(ef *elf.File) (name string, crc uint32, ok bool) {
	sect := ef.Section(".gnu_debuglink")
	if sect == nil || sect.Size > 4096 {
		return "", 0, false
	}
	data, err := sect.Data()
	if err != nil {
		return "", 0, false
	}
	end := strings.IndexByte(string(data), 0)
	if end <= 0 {
		return "", 0, false
	}
	name = string(data[:end])
	if strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return "", 0, false
	}
	off := (uint64(end+1) + 3) &^ 3
	if off+4 > uint64(len(data)) {
		return "", 0, false
	}
	return name, ef.ByteOrder.Uint32(data[off:]), true
}
