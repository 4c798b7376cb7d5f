package symbolize

import (
	"strings"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize/buildid"
)

// classification is the verdict on one binary.
type classification struct {
	mode Mode
	// debugKey names the debug file in tables: the build-id in file mode,
	// or the .gnu_debuglink target in process mode ("" when the binary
	// answers itself).
	debugKey string
}

// SkipPath reports whether a mapping path never holds anything to name:
// the kernel's [vdso]/[vsyscall]/[vvar], anonymous memory, and JIT code
// (memfd, anonymous named regions, perf-PID.map style JIT dumps).
func SkipPath(path string) bool {
	switch {
	case path == "", strings.HasPrefix(path, "["), strings.HasPrefix(path, "//anon"),
		strings.HasPrefix(path, "/memfd:"), strings.HasPrefix(path, "anon_inode:"):
		return true
	}
	return false
}

// Classify returns the mode of a mapping of bin. The verdict is kept per
// binary (device and inode), so a process whose mappings change gets new
// mappings classified as they appear; bin replaced on disk is a new key.
func (s *Symbolizer) Classify(ref MappingRef, bin *Binary) Mode {
	if SkipPath(ref.Path) || bin == nil {
		s.stats.modeSkip.Add(1)
		return ModeSkip
	}
	return s.classify(ref, bin).mode
}

func (s *Symbolizer) classify(ref MappingRef, bin *Binary) *classification {
	if c, ok := s.classified.Get(ref.Key); ok {
		return c
	}
	c := s.evaluate(ref, bin)
	switch c.mode {
	case ModeSkip:
		s.stats.modeSkip.Add(1)
	case ModeProcess:
		s.stats.modeProcess.Add(1)
	case ModeFile:
		s.stats.modeFile.Add(1)
	}
	s.classified.Add(ref.Key, c)
	return c
}

func (s *Symbolizer) evaluate(ref MappingRef, bin *Binary) *classification {
	file, fileErr := process.StatFile(bin.f.OS)
	haveFile := fileErr == nil
	if haveFile && s.nothing.Contains(file) {
		s.stats.negativeHits.Add(1)
		return &classification{mode: ModeSkip}
	}
	if bin.HasDWARF() || bin.HasSymtab() || bin.HasGopclntab() {
		return &classification{mode: ModeProcess}
	}
	if key, ok := s.resolveDebugLink(ref, bin); ok {
		return &classification{mode: ModeProcess, debugKey: key}
	}
	if id := bin.BuildIDGNU(); buildid.Valid(id) {
		return &classification{mode: ModeFile, debugKey: id}
	}
	// No debug info anywhere: .dynsym is all there is.
	if bin.SymbolsErr() == nil {
		return &classification{mode: ModeProcess}
	}
	if haveFile {
		s.nothing.Add(file)
	}
	return &classification{mode: ModeSkip}
}
