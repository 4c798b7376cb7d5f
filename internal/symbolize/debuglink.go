package symbolize

import (
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bpfcol/bpfcol/internal/process"
)

// resolveDebugLink follows bin's .gnu_debuglink in gdb's order: the
// binary's directory, its .debug subdirectory, then the global debug
// directories with the binary's directory appended. The binary's own
// directories are resolved inside the process's root. The target's CRC32
// must match.
func (s *Symbolizer) resolveDebugLink(ref MappingRef, bin *Binary) (string, bool) {
	name, crc, ok := bin.DebugLink()
	if !ok || ref.Path == "" || !filepath.IsAbs(ref.Path) {
		return "", false
	}
	dir := filepath.Dir(ref.Path)
	type candidate struct {
		path string
		pid  int // whose root path is in; 0 for our own
	}
	cands := []candidate{
		// The binary's directories live in the process's mount namespace;
		// the system and configured directories are the collector's own.
		{filepath.Join(dir, name), ref.PID},
		{filepath.Join(dir, ".debug", name), ref.PID},
		{filepath.Join(s.cfg.SystemDebugDir, dir, name), 0},
	}
	for _, d := range s.cfg.DebugDirectories {
		cands = append(cands, candidate{filepath.Join(d, dir, name), 0})
	}
	for _, c := range cands {
		key := "debuglink:" + c.path
		if c.pid > 0 {
			key = "debuglink:" + strconv.Itoa(c.pid) + ":" + c.path
		}
		if dbg := s.tables.get(key); dbg != nil {
			dbg.Release()
			return key, true
		}
		// The process's own directories resolve inside its root; the
		// debug directories only beneath themselves (openLocal).
		var f *os.File
		var err error
		if c.pid > 0 {
			f, err = process.OpenInRoot(c.pid, c.path)
		} else {
			f, err = s.openLocal(c.path)
		}
		if err != nil {
			continue
		}
		if !crcMatches(f, crc) {
			f.Close()
			continue
		}
		if dbg := s.openDebug(key, f, func(*Binary) bool { return true }); dbg != nil {
			dbg.Release()
			return key, true
		}
	}
	return "", false
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

// DebugLink returns the file name and CRC32 of the .gnu_debuglink section.
func (b *Binary) DebugLink() (name string, crc uint32, ok bool) {
	sect := b.f.ELF.Section(".gnu_debuglink")
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
	off := alignUp(uint64(end+1), 4)
	if off+4 > uint64(len(data)) {
		return "", 0, false
	}
	return name, b.f.ELF.ByteOrder.Uint32(data[off:]), true
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }
