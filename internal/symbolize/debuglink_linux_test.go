package symbolize

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
)

// debugLinkedCopy writes a --strip-all copy of full to dir/prog whose
// .gnu_debuglink names debugFile (a copy of full placed there first), and
// opens it.
func debugLinkedCopy(t *testing.T, full, dir, debugFile string) (string, *Binary) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(debugFile), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "", "cp", full, debugFile)
	prog := filepath.Join(dir, "prog")
	run(t, "", "objcopy", "--strip-all", "--add-gnu-debuglink="+debugFile, full, prog)
	f, err := os.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBinary(f, NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if b.HasDWARF() || b.HasSymtab() {
		t.Fatalf("%s kept its debug info", prog)
	}
	if name, _, ok := b.DebugLink(); !ok || name != filepath.Base(debugFile) {
		t.Fatalf("DebugLink() = %q, %v", name, ok)
	}
	return prog, b
}

// TestDebugLinkThroughProcessRoot names the addresses of a stripped binary
// from the file its .gnu_debuglink names, next to it and in its .debug
// directory, found through the process's root; a debug file whose CRC no
// longer matches is refused, and the binary falls back to its build-id.
func TestDebugLinkThroughProcessRoot(t *testing.T) {
	var full string
	for _, w := range symtest.DWARFWorkloads(t, workloadDir) {
		if w.Name == "c-dwarf5" {
			full = w.Path
		}
	}
	if full == "" {
		t.Fatal("no c-dwarf5 workload")
	}
	seg := execSegment(t, full)
	addrs := textAddresses(t, full, 20)
	want := llvmFrames(t, full, addrs)
	newSymbolizer := func() *Symbolizer {
		s, err := NewSymbolizer(SymbolizerConfig{SystemDebugDir: t.TempDir(), Getenv: func(string) string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for _, where := range []string{"prog.debug", ".debug/prog.debug"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			prog, bin := debugLinkedCopy(t, full, dir, filepath.Join(dir, where))
			fi, _ := bin.f.OS.Stat()
			key, _ := fileKeyOf(fi)
			ref := MappingRef{PID: os.Getpid(), Path: prog, Key: key}
			s := newSymbolizer()
			if m := s.Classify(ref, bin); m != ModeProcess {
				t.Fatalf("Classify = %v, want process mode through the debug link", m)
			}
			named := 0
			for i, a := range addrs {
				l := s.Symbolize(ref, bin, a-seg.Vaddr+seg.Off)
				if len(want[i]) > 0 && want[i][0].File != "" && l.Status == Resolved && framesEqual(l.Frames, want[i]) {
					named++
				}
			}
			if named == 0 {
				t.Fatalf("no address named with file:line from the linked debug file")
			}
			if st := s.Stats(); st.LocalHits != 1 || st.Tables != 1 {
				t.Errorf("stats %+v: want the linked file opened once and held", st)
			}
		})
	}
	t.Run("crc-mismatch", func(t *testing.T) {
		dir := t.TempDir()
		debugFile := filepath.Join(dir, "prog.debug")
		prog, bin := debugLinkedCopy(t, full, dir, debugFile)
		f, err := os.OpenFile(debugFile, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte{0})
		f.Close()
		fi, _ := bin.f.OS.Stat()
		key, _ := fileKeyOf(fi)
		s := newSymbolizer()
		if m := s.Classify(MappingRef{PID: os.Getpid(), Path: prog, Key: key}, bin); m != ModeFile {
			t.Fatalf("Classify = %v with a debug file of another CRC, want file mode by build-id", m)
		}
		if st := s.Stats(); st.LocalHits != 0 || st.Tables != 0 {
			t.Errorf("stats %+v: the mismatching debug file was used", st)
		}
	})
}
