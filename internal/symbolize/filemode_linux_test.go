//go:build linux

package symbolize

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
	"github.com/bpfcol/bpfcol/internal/testdebuginfod"
)

// stripCopy writes an objcopy --strip-all copy of bin to dst and checks the
// build-id note survived.
func stripCopy(t *testing.T, bin, dst string) string {
	t.Helper()
	run(t, "", "objcopy", "--strip-all", bin, dst)
	f, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBinary(f, NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.HasDWARF() || b.HasSymtab() {
		t.Fatalf("%s still has DWARF or .symtab after --strip-all", dst)
	}
	return b.BuildIDGNU()
}

func gnuBuildID(t *testing.T, bin string) string {
	t.Helper()
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBinary(f, NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.BuildIDGNU() == "" {
		t.Fatalf("%s has no GNU build-id", bin)
	}
	return b.BuildIDGNU()
}

// execSegment returns the executable PT_LOAD of bin, to turn virtual
// addresses into file offsets.
func execSegment(t *testing.T, bin string) *elf.Prog {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p
		}
	}
	t.Fatalf("%s has no executable segment", bin)
	return nil
}

// TestFileModeThroughDebuginfod runs stripped C and C++ workloads, fetches
// their debug info from a real debuginfod serving the unstripped builds,
// and checks names, file:line and inline chains against llvm-symbolizer on
// the unstripped builds. The first lookups go out pending; later ones are
// named; a second Symbolizer over the same cache finds the files on disk
// without fetching.
func TestFileModeThroughDebuginfod(t *testing.T) {
	ws := symtest.DWARFWorkloads(t, workloadDir)
	srv := t.TempDir()
	runDir := t.TempDir()
	var ids []string
	type target struct{ full, stripped, id string }
	var targets []target
	for _, name := range []string{"c-dwarf5", "cpp-dwarf5"} {
		var w symtest.DWARFWorkload
		for _, x := range ws {
			if x.Name == name {
				w = x
			}
		}
		full := filepath.Join(srv, name)
		run(t, "", "cp", w.Path, full)
		stripped := filepath.Join(runDir, name)
		id := stripCopy(t, full, stripped)
		if id != gnuBuildID(t, full) {
			t.Fatalf("%s: stripping changed the build-id", name)
		}
		ids = append(ids, id)
		targets = append(targets, target{full, stripped, id})
	}
	url := testdebuginfod.Start(t, srv, ids...)
	cacheDir := t.TempDir()
	cfg := SymbolizerConfig{
		SystemDebugDir: t.TempDir(),
		CacheDir:       cacheDir,
		Debuginfod:     debuginfod.Config{URLs: []string{url}, Timeout: 30 * time.Second},
		Getenv:         func(string) string { return "" },
	}
	s, err := NewSymbolizer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	for _, tg := range targets {
		cmd := exec.Command(tg.stripped, "spin")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := cmd.Process.Pid
		var m *process.Mapping
		for deadline := time.Now().Add(5 * time.Second); m == nil && time.Now().Before(deadline); {
			maps, err := process.ReadMappings(pid)
			if err != nil {
				t.Fatal(err)
			}
			for i := range maps {
				if maps[i].Path == tg.stripped && maps[i].Executable() {
					m = &maps[i]
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if m == nil {
			t.Fatalf("no executable mapping of %s in process %d", tg.stripped, pid)
		}
		f, err := process.OpenMapping(pid, m)
		if err != nil {
			t.Fatal(err)
		}
		bin, err := OpenBinary(f, NewTables(0))
		if err != nil {
			t.Fatal(err)
		}
		defer bin.Close()
		ref := MappingRef{PID: pid, Path: m.Path, Key: process.FileKey{Dev: m.Dev, Ino: m.Inode}}
		if mode := s.Classify(ref, bin); mode != ModeFile {
			t.Fatalf("%s classified %v, want file", tg.stripped, mode)
		}
		seg := execSegment(t, tg.full)
		addrs := textAddresses(t, tg.full, 40000)
		fileOff := func(vaddr uint64) uint64 { return vaddr - seg.Vaddr + seg.Off }
		// The first lookup starts the fetch and must not wait for it.
		first := s.Symbolize(ref, bin, fileOff(addrs[len(addrs)/2]))
		if first.Status != Pending && first.Status != Resolved {
			t.Fatalf("first lookup: status %v, want pending", first.Status)
		}
		deadline := time.Now().Add(60 * time.Second)
		for s.Symbolize(ref, bin, fileOff(addrs[len(addrs)/2])).Status == Pending {
			if time.Now().After(deadline) {
				t.Fatalf("%s: debug info never arrived; stats %+v", tg.stripped, s.Stats())
			}
			time.Sleep(50 * time.Millisecond)
		}
		want := llvmFrames(t, tg.full, addrs)
		misses, inline := 0, 0
		for i, a := range addrs {
			l := s.Symbolize(ref, bin, fileOff(a))
			if l.VAddr != a {
				t.Fatalf("vaddr %#x came back as %#x", a, l.VAddr)
			}
			if len(l.Frames) > 1 {
				inline++
			}
			if !framesEqual(l.Frames, want[i]) && len(want[i]) > 0 && want[i][0].File != "crtstuff.c" {
				misses++
				if misses < 5 {
					t.Logf("%s %#x: %s", filepath.Base(tg.stripped), a, framesDiff(l.Frames, want[i]))
				}
			}
		}
		t.Logf("%s: %d addresses through file mode, %d with inline chains, %d misses", filepath.Base(tg.stripped), len(addrs), inline, misses)
		if misses > len(addrs)/1000 {
			t.Errorf("%s: %d misses of %d", tg.stripped, misses, len(addrs))
		}
		if inline == 0 {
			t.Errorf("%s: no inline chain came through file mode", tg.stripped)
		}
	}
	st := s.Stats()
	t.Logf("stats: %+v", st)
	if st.Fetches != 2 || st.FetchBytes == 0 || st.ModeFile != 2 || st.Pending == 0 {
		t.Errorf("stats %+v: want 2 fetches with bytes, 2 file-mode binaries, pending lookups", st)
	}
	info, err := os.Stat(filepath.Join(cacheDir, ".build-id"))
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("cache dir mode %v, %v; want 0700", info.Mode().Perm(), err)
	}

	// A restart: the cache answers, nothing is fetched.
	s2, err := NewSymbolizer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, tg := range targets {
		f, err := os.Open(tg.stripped)
		if err != nil {
			t.Fatal(err)
		}
		bin, err := OpenBinary(f, NewTables(0))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		key, _ := fileKeyOf(fi)
		seg := execSegment(t, tg.full)
		a := textAddresses(t, tg.full, 10)[5]
		l := s2.Symbolize(MappingRef{Path: tg.stripped, Key: key}, bin, a-seg.Vaddr+seg.Off)
		if l.Status != Resolved {
			t.Errorf("after restart %s: status %v, want resolved from the cache", tg.stripped, l.Status)
		}
		bin.Close()
	}
	if st := s2.Stats(); st.Fetches != 0 || st.LocalHits != 2 {
		t.Errorf("after restart: stats %+v, want 0 fetches and 2 local hits", st)
	}
}

func elfSection(t *testing.T, bin, name string) *elf.Section {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(name)
	if s == nil || s.Flags&elf.SHF_COMPRESSED != 0 {
		t.Fatalf("%s: no uncompressed %s", bin, name)
	}
	return s
}
