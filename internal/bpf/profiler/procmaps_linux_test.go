//go:build linux && (amd64 || arm64)

package profiler

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// noticesOf reads s's notices on a goroutine of its own until the test
// ends, handing over those of pid.
func noticesOf(t *testing.T, s *Sampler, pid int) <-chan Notice {
	t.Helper()
	out := make(chan Notice, 1024)
	go func() {
		defer close(out)
		var n Notice
		for {
			if err := s.ReadNotice(&n); err != nil {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("reading notices: %v", err)
				}
				return
			}
			if int(n.PID) != pid {
				continue
			}
			c := n
			c.Mappings = append([]UnwindMapping(nil), n.Mappings...)
			select {
			case out <- c:
			default:
			}
		}
	}()
	return out
}

// waitNotice returns the first notice of kind from ns, within 10 s,
// polling s for notices sent without a wakeup.
func waitNotice(t *testing.T, s *Sampler, ns <-chan Notice, kind NoticeKind, what string) Notice {
	t.Helper()
	deadline := time.After(10 * time.Second)
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-poll.C:
			s.PollNotices()
		case n, ok := <-ns:
			if !ok {
				t.Fatalf("notices ended before %s", what)
			}
			if n.Kind == kind {
				return n
			}
		case <-deadline:
			t.Fatalf("no %s within 10s", what)
		}
	}
}

// execMappings returns pid's executable mappings as /proc/PID/maps shows
// them: the truth a read in BPF is checked against.
func execMappings(t *testing.T, pid int) []process.Mapping {
	t.Helper()
	all, err := process.ReadMappings(pid)
	if err != nil {
		t.Fatal(err)
	}
	var out []process.Mapping
	for _, m := range all {
		if m.Executable() && m.Start < 1<<47 {
			out = append(out, m)
		}
	}
	return out
}

// waitLoaded waits for pid to run the executable whose path ends in exe,
// with libc mapped by ld.so, and returns its executable mappings then. A
// sampler started after reads them whole at its first sample, as
// /proc/PID/maps shows them after; one started before may sample ld.so at
// work, and then read fewer.
func waitLoaded(t *testing.T, pid int, exe string) []process.Mapping {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms := execMappings(t, pid)
		for _, m := range ms {
			if strings.HasSuffix(ms[0].Path, exe) && strings.HasPrefix(filepath.Base(m.Path), "libc.so") {
				return ms
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d does not run %s with libc mapped: %+v", pid, exe, ms)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sameMappings fails unless got, read by the sampler, are want, read from
// /proc: range, file offset, file and kind, the vDSO told apart.
func sameMappings(t *testing.T, got []UnwindMapping, want []process.Mapping) {
	t.Helper()
	describe := func() string { return fmt.Sprintf("\ngot  %+v\nwant %+v", got, want) }
	if len(got) != len(want) {
		t.Fatalf("%d executable mappings read, /proc/PID/maps shows %d%s", len(got), len(want), describe())
	}
	for i, w := range want {
		g := got[i]
		if g.Start != w.Start || g.End != w.End || g.Prot&ProtExec == 0 {
			t.Fatalf("mapping %d: %#x-%#x prot %d, want %#x-%#x executable%s", i, g.Start, g.End, g.Prot, w.Start, w.End, describe())
		}
		switch {
		case w.Path == "[vdso]":
			if g.Kind != MappingVDSO {
				t.Fatalf("mapping %d, the vDSO, is of kind %d%s", i, g.Kind, describe())
			}
		case w.Inode != 0:
			if g.Kind != MappingFile || g.File != w.Key() || g.Offset() != w.Offset {
				t.Fatalf("mapping %d of %s: kind %d file %+v offset %#x, want file %+v offset %#x%s",
					i, w.Path, g.Kind, g.File, g.Offset(), w.Key(), w.Offset, describe())
			}
		default:
			if g.Kind != MappingAnon {
				t.Fatalf("mapping %d, anonymous, is of kind %d%s", i, g.Kind, describe())
			}
		}
	}
}

// TestSamplerReadsMappingsAtFirstSample runs a busy program under the
// sampler: its first sample has BPF read its executable mappings, the
// same as /proc/PID/maps shows; a walk in a file with no table asks for
// it (NoticeFile, once); and its exit forgets it and says so.
func TestSamplerReadsMappingsAtFirstSample(t *testing.T) {
	testenv.RequireBPF(t)
	testenv.Kernel(t, testenv.TaskWork, CheckCompose())
	bin := testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...)
	cmd := testworkload.Start(t, bin, "30")
	pid := cmd.Process.Pid
	waitLoaded(t, pid, "/cpuhog")
	s, err := New(Options{Frequency: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ns := noticesOf(t, s, pid)

	n := waitNotice(t, s, ns, NoticeProcess, "notice of the mappings read")
	sameMappings(t, n.Mappings, execMappings(t, pid))
	if n.Exe != execMappings(t, pid)[0].Key() {
		t.Errorf("executable %+v, want the first mapping's file %+v", n.Exe, execMappings(t, pid)[0].Key())
	}
	held, img, ok, err := s.UnwindMappings(uint32(pid))
	if err != nil || !ok {
		t.Fatalf("no mappings held for pid %d: %v", pid, err)
	}
	if img != n.Image || img.MM == 0 || img.StartNs == 0 {
		t.Errorf("held image %+v, notice's %+v", img, n.Image)
	}
	sameMappings(t, held, execMappings(t, pid))

	f := waitNotice(t, s, ns, NoticeFile, "notice of a file to build")
	if len(f.Mappings) != 1 || f.Mappings[0].Kind != MappingFile {
		t.Fatalf("file notice with mappings %+v", f.Mappings)
	}
	st, ok, err := s.LookupUnwindFile(f.Mappings[0].File)
	if err != nil || !ok || st.State != FilePending {
		t.Fatalf("file %+v asked for: held %+v %v %v, want pending", f.Mappings[0].File, st, ok, err)
	}
	// Asked once: the pending entry stands for the file.
	time.Sleep(500 * time.Millisecond)
drain:
	for {
		select {
		case again := <-ns:
			if again.Kind == NoticeFile && again.Mappings[0].File == f.Mappings[0].File {
				t.Fatalf("file %+v asked for twice", f.Mappings[0].File)
			}
		default:
			break drain
		}
	}

	cmd.Process.Kill()
	cmd.Wait()
	waitNotice(t, s, ns, NoticeExit, "notice of the exit")
	if _, _, ok, err := s.UnwindMappings(uint32(pid)); ok || err != nil {
		t.Fatalf("pid %d's mappings still held after its exit (%v)", pid, err)
	}
}

// TestSamplerAsksUserSpaceToReadMappings runs the sampler kernels without
// task work get: a process's first sample asks user space to read its
// mappings (NoticeRead, with the image they must be set for); once set,
// its samples are walked through them (a file entered is asked for).
func TestSamplerAsksUserSpaceToReadMappings(t *testing.T) {
	testenv.RequireBPF(t)
	composeInBPF = func() error { return errors.New("kernel feature missing: test") }
	t.Cleanup(func() { composeInBPF = CheckCompose })
	bin := testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...)
	s, err := New(Options{Frequency: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ComposeError() == nil {
		t.Fatal("the sampler reads mappings in BPF")
	}
	cmd := testworkload.Start(t, bin, "30")
	pid := cmd.Process.Pid
	ns := noticesOf(t, s, pid)
	r := waitNotice(t, s, ns, NoticeRead, "request to read the mappings")
	if r.Image.MM == 0 || r.Image.StartNs == 0 {
		t.Fatalf("request without the image: %+v", r)
	}
	var maps []UnwindMapping
	for _, m := range execMappings(t, pid) {
		um := UnwindMapping{Start: m.Start, End: m.End, FileBase: m.Start - m.Offset, Kind: MappingAnon, Prot: ProtRead | ProtExec}
		if m.Inode != 0 {
			um.Kind, um.File = MappingFile, m.Key()
		}
		maps = append(maps, um)
	}
	if isNew, err := s.SetUnwindMappings(uint32(pid), r.Image, maps); err != nil || !isNew {
		t.Fatalf("setting the mappings: new %v, %v", isNew, err)
	}
	f := waitNotice(t, s, ns, NoticeFile, "notice of a file to build")
	if f.Mappings[0].File != maps[0].File && (len(maps) < 2 || f.Mappings[0].File != maps[1].File) {
		t.Logf("first file asked for: %+v", f.Mappings[0])
	}
}

// TestSamplerNamesOverlayFilesAsProc runs a program from an overlayfs
// mount, in a mount namespace of its own, as containers do: the kernel
// maps the backing (lower) file, yet the sampler must name the file as
// /proc/PID/maps does, the overlay's inode, which is the file user space
// opens through /proc/PID/map_files.
func TestSamplerNamesOverlayFilesAsProc(t *testing.T) {
	testenv.RequireBPF(t)
	testenv.Kernel(t, testenv.TaskWork, CheckCompose())
	unshare := testenv.LookPath(t, "unshare")
	bin := testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...)
	dir := t.TempDir()
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lower", "cpuhog"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("mount -t overlay overlay -o lowerdir=%[1]s/lower,upperdir=%[1]s/upper,workdir=%[1]s/work %[1]s/merged && exec %[1]s/merged/cpuhog 30", dir)
	cmd := testworkload.Start(t, unshare, "--mount", "--propagation", "private", "sh", "-c", script)
	pid := cmd.Process.Pid
	// The pid runs unshare and sh before cpuhog.
	want := waitLoaded(t, pid, "/merged/cpuhog")
	s, err := New(Options{Frequency: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ns := noticesOf(t, s, pid)
	n := waitNotice(t, s, ns, NoticeProcess, "notice of the mappings read")
	lower, err := os.Stat(filepath.Join(dir, "lower", "cpuhog"))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := process.FileIDOf(lower); id.FileKey == want[0].Key() {
		t.Fatalf("the overlay shows the lower file's identity %+v: the test proves nothing", id)
	}
	sameMappings(t, n.Mappings, want)
	f, err := process.OpenMappedFile(pid, want[0].Start, want[0].End, n.Mappings[0].File)
	if err != nil {
		t.Fatalf("opening the mapping as the sampler names it: %v", err)
	}
	f.Close()
}

// TestSamplerBacksOffReadsAskedByLeaves runs a program that loads a
// library and spends its time in it, under the sampler that leaves reads
// to user space, which keeps setting mappings without the library (as
// with a JIT that keeps mapping code): its samples' leaves stay outside
// them, and they ask again, each time waiting twice as long (from 10 ms),
// not once per sample.
func TestSamplerBacksOffReadsAskedByLeaves(t *testing.T) {
	testenv.RequireBPF(t)
	composeInBPF = func() error { return errors.New("kernel feature missing: test") }
	t.Cleanup(func() { composeInBPF = CheckCompose })
	lib := testworkload.BuildC(t, "dlopenlib.c", "-shared", "-fPIC")
	bin := testworkload.BuildC(t, "dlopenhot.c")
	s, err := New(Options{Frequency: 997})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cmd := testworkload.Start(t, bin, lib, "0.2")
	pid := cmd.Process.Pid
	ns := noticesOf(t, s, pid)
	var maps []UnwindMapping
	for _, m := range execMappings(t, pid) {
		if m.Path == lib {
			continue
		}
		um := UnwindMapping{Start: m.Start, End: m.End, FileBase: m.Start - m.Offset, Kind: MappingAnon, Prot: ProtRead | ProtExec}
		if m.Inode != 0 {
			um.Kind, um.File = MappingFile, m.Key()
		}
		maps = append(maps, um)
	}
	deadline := time.After(3 * time.Second)
	type read struct {
		at    time.Duration
		image Image
	}
	var asked []read
	start := time.Now()
	for done := false; !done; {
		select {
		case n := <-ns:
			if n.Kind != NoticeRead {
				continue
			}
			asked = append(asked, read{time.Since(start).Round(time.Millisecond), n.Image})
			if _, err := s.SetUnwindMappings(uint32(pid), n.Image, maps); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			done = true
		}
	}
	if len(asked) == 0 {
		t.Fatal("no read asked in 3 s")
	}
	// A sample taken before the exec (a loaded machine) asks for the
	// forked image's mappings, counted apart: only the program's own
	// image's reads back off.
	var reads []uint8
	var at []time.Duration
	last := asked[len(asked)-1].image
	for _, r := range asked {
		if r.image.MM == last.MM && r.image.StartNs == last.StartNs {
			reads = append(reads, r.image.Reads)
			at = append(at, r.at)
		}
	}
	t.Logf("reads asked at %v, counts %v (%d of an earlier image)", at, reads, len(asked)-len(reads))
	// 10 + 20 + ... + 1280 ms: 8 reads after the first in 2.5 s.
	if len(reads) < 3 || len(reads) > 12 {
		t.Fatalf("%d reads asked in 3 s, want a few growing apart (10 ms doubling)", len(reads))
	}
	for i := 1; i < len(reads); i++ {
		if reads[i] <= reads[i-1] {
			t.Fatalf("reads asked counted %v: the backoff does not grow", reads)
		}
	}
}
