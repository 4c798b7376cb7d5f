package ebpfprofreceiver

import (
	"context"
	"debug/elf"
	"os/exec"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// entrySymbol returns the function at the ELF entry point of bin, where a
// complete stack of its main thread ends: the truth comes from the binary,
// not from a list of libc start-up names.
func entrySymbol(t *testing.T, bin string) string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	// musl's crt1 defines _start in assembly without a symbol type.
	for _, s := range syms {
		if typ := elf.ST_TYPE(s.Info); (typ == elf.STT_FUNC || typ == elf.STT_NOTYPE) && s.Value == f.Entry && s.Name != "" {
			return s.Name
		}
	}
	t.Fatalf("%s: no function symbol at the entry point %#x", bin, f.Entry)
	return ""
}

// TestLibcVariantsProfiled profiles the C hog built against musl (dynamic
// and static) and statically against glibc, with frame pointers and
// without (where only the executable's CFI walks its frames), all in one
// receiver, from the moment each has its unwind tables: at least 95% of
// each build's samples in leaf carry leaf, middle, main, then:
//   - glibc static: the start-up code to the function at the binary's ELF
//     entry point (_start);
//   - musl: main's one caller in musl's start-up code, and no more: musl
//     is built without frame pointers and without unwind tables (Debian's
//     libc.so has 4 FDEs), so nothing can walk further; that frame is
//     named where the binary names it (libc_start_main_stage2 in the
//     static build's symbol table; nothing in the dynamic libc.so, which
//     keeps only its exported symbols).
func TestLibcVariantsProfiled(t *testing.T) {
	testenv.RequireBPF(t)
	fp := testworkload.CPUHogFlags()
	noFP := []string{"-O2", "-g", "-fomit-frame-pointer"}
	const muslLibc = "/usr/lib/x86_64-linux-musl/libc.so"
	musl := func(bin string) []string { return []string{""} }
	muslStatic := func(bin string) []string {
		requireSymbol(t, bin, "libc_start_main_stage2", true)
		return []string{"libc_start_main_stage2"}
	}
	glibcStatic := func(bin string) []string {
		return []string{"__libc_start_call_main", "__libc_start_main", entrySymbol(t, bin)}
	}
	builds := []struct {
		name, bin string
		// callers returns the frames expected after main, outermost last.
		callers func(bin string) []string
	}{
		{"musl", testworkload.BuildMusl(t, "cpuhog.c", fp...), musl},
		{"musl without frame pointers", testworkload.BuildMusl(t, "cpuhog.c", noFP...), musl},
		{"musl static", testworkload.BuildMusl(t, "cpuhog.c", append([]string{"-static"}, fp...)...), muslStatic},
		{"glibc static", testworkload.BuildC(t, "cpuhog.c", append([]string{"-static"}, fp...)...), glibcStatic},
		{"glibc static without frame pointers", testworkload.BuildC(t, "cpuhog.c", append([]string{"-static"}, noFP...)...), glibcStatic},
	}
	requireSymbol(t, muslLibc, "libc_start_main_stage2", false)
	sink := new(gatedSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	r, err := newProfilesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = r.Shutdown(context.Background())
		}
	}()
	var cmds []*exec.Cmd
	for _, b := range builds {
		cmds = append(cmds, testworkload.Start(t, b.bin))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, cmd := range cmds {
		for !r.unwind.Ready(uint32(cmd.Process.Pid)) {
			if time.Now().After(deadline) {
				t.Fatalf("unwind tables of pid %d not loaded after 30s: %+v", cmd.Process.Pid, r.unwind.Stats())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Intervals that begin after this hold only samples walked with the
	// tables (a drain period of margin).
	sink.from.Store(time.Now().Add(500 * time.Millisecond).UnixNano())
	time.Sleep(4*time.Second + cfg.ReportInterval)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped = true
	sink.mu.Lock()
	measured := sink.measured
	sink.mu.Unlock()
	checkNoImpossibleFrames(t, measured)
	for i, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			want := append([]string{"leaf", "middle", "main"}, b.callers(b.bin)...)
			var inLeaf, complete int64
			seen := map[string]int64{}
			for _, p := range measured {
				for _, s := range pprofiletest.Samples(p) {
					names := s.UserNames()
					if s.PID != int64(cmds[i].Process.Pid) || len(names) == 0 || names[0] != "leaf" {
						continue
					}
					inLeaf += s.Count
					if slices.Equal(names, want) {
						complete += s.Count
					} else {
						seen[joinNames(names)] += s.Count
					}
				}
			}
			t.Logf("%d of %d samples in leaf are %v; others: %v", complete, inLeaf, want, seen)
			// 44-52 seen in a loaded run.
			if inLeaf < 20 {
				t.Fatalf("only %d samples in leaf", inLeaf)
			}
			if complete*100 < inLeaf*95 {
				t.Errorf("%d of %d samples in leaf are %v, want at least 95%%", complete, inLeaf, want)
			}
		})
	}
}

// requireSymbol checks whether bin's symbol tables name a function name:
// the truth behind the frame names expected of it.
func requireSymbol(t *testing.T, bin, name string, want bool) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	dyn, _ := f.DynamicSymbols()
	found := slices.ContainsFunc(append(syms, dyn...), func(s elf.Symbol) bool { return s.Name == name })
	if found != want {
		t.Fatalf("%s names %s: %v, the test expects %v", bin, name, found, want)
	}
}
