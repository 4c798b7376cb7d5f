package ebpfprofreceiver

import (
	"bytes"
	"debug/elf"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestVDSOFramesNamed profiles a program that spends its time reading the
// clock through the vDSO: its [vdso] frames are named (clock_gettime and
// the vDSO's own helpers), and the mapping carries the vDSO's build-id.
func TestVDSOFramesNamed(t *testing.T) {
	bin := testworkload.BuildC(t, "clockloop.c", "-O2", "-g")
	_, all := profileRun(t, bin, 4*time.Second)
	var named, unnamed, clock int
	names := map[string]int{}
	for _, frames := range workloadFrames(all, "[vdso]") {
		for _, f := range frames {
			if len(f.lines) == 0 || f.lines[0].function == "" || f.buildID == "" {
				unnamed++
				continue
			}
			named++
			names[f.lines[0].function]++
			if strings.Contains(f.lines[0].function, "clock_gettime") {
				clock++
			}
		}
	}
	t.Logf("[vdso] locations: %d named (with build-id), %d not; names %v", named, unnamed, names)
	if named+unnamed == 0 {
		t.Fatal("no [vdso] frame in the profiles: the workload's clock reads did not go through the vDSO")
	}
	if unnamed > 0 {
		t.Errorf("%d [vdso] locations without a name or build-id", unnamed)
	}
	if clock == 0 {
		t.Errorf("no [vdso] location named clock_gettime: %v", names)
	}
}

// vdsoNames are the names of the functions the vDSO exports, as its
// frames are named.
func vdsoNames(t *testing.T) map[string]bool {
	t.Helper()
	image, err := process.VDSOImage()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			names[s.Name] = true
		}
	}
	return names
}

// TestCFIThroughVDSO profiles a program without frame pointers that spends
// its time reading clocks through the vDSO: the monotonic clock, which the
// vDSO's clock_gettime reads itself, called through libc's clock_gettime,
// a wrapper that keeps no frame pointer; the thread's CPU time, for which
// the vDSO makes the system call; and the vDSO's time, a function without
// a frame pointer, which libc resolves callers straight to. The vDSO's own
// .eh_frame walks them: at least 95% of the samples with their user leaf in
// the vDSO reach the root through the caller (read_clock, read_cputime or
// read_time) and main, and so do those of each kind.
func TestCFIThroughVDSO(t *testing.T) {
	bin := testworkload.BuildC(t, "clockloop.c", noFramePointers...)
	inVDSO := vdsoNames(t)
	cmd := startWorkload(t, bin)
	run := profileWithCFI(t, 5*time.Second, cmd)
	type share struct{ all, whole int64 }
	kinds := map[string]*share{"all": {}, "through libc's clock_gettime": {}, "in the vDSO's time": {}}
	var cut []string
	leaves := map[string]int64{}
	for _, s := range run.samplesOf(cmd.Process.Pid) {
		names := s.UserNames()
		if len(names) == 0 {
			continue
		}
		leaves[names[0]] += s.Count
		if !inVDSO[names[0]] {
			continue
		}
		caller := slices.IndexFunc(names, func(n string) bool { return n == "read_clock" || n == "read_cputime" || n == "read_time" })
		whole := caller > 0 && completeStack(names) && slices.Contains(names[caller:], "main")
		for kind, sh := range kinds {
			if kind == "all" || kind == "through libc's clock_gettime" && slices.Contains(names, "__clock_gettime") ||
				kind == "in the vDSO's time" && names[0] == "__vdso_time" {
				sh.all += s.Count
				if whole {
					sh.whole += s.Count
				}
			}
		}
		if !whole && len(cut) < 5 {
			cut = append(cut, "["+joinNames(names)+"]")
		}
	}
	t.Logf("user leaves: %v", leaves)
	for kind, sh := range kinds {
		t.Logf("leaf in the vDSO, %s: %d of %d samples reach the root (%.1f%%)", kind, sh.whole, sh.all, pct(sh.whole, sh.all))
		if sh.all < 20 {
			t.Errorf("leaf in the vDSO, %s: only %d samples", kind, sh.all)
		} else if pct(sh.whole, sh.all) < 95 {
			t.Errorf("leaf in the vDSO, %s: %.1f%% of the samples reach the root, want >= 95%%; some cut: %v", kind, pct(sh.whole, sh.all), cut)
		}
	}
}
