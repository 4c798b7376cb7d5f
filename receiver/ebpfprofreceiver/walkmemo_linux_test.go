package ebpfprofreceiver

import (
	"debug/elf"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestSameAddressesOtherRules profiles two non-PIE builds of sameaddr.c at
// once: the same instructions at the same addresses, but mid keeps 264
// bytes of stack in one and 520 in the other, so the return address into
// mid has another CFA rule in each. Both spin on one CPU, so its sampler
// walks one process, then the other. A row found for one process and
// reused for the other's same address (the sampler keeps a per-CPU memo
// of rows) would send the other's walk to the wrong return address.
func TestSameAddressesOtherRules(t *testing.T) {
	var bins []string
	for _, frame := range []int{264, 520} {
		bins = append(bins, testworkload.BuildC(t, "sameaddr.c",
			append([]string{"-no-pie", fmt.Sprintf("-DFRAME=%d", frame)}, noFramePointers...)...))
	}
	// The premise: the chain's functions are at the same addresses.
	a, b := funcAddrs(t, bins[0]), funcAddrs(t, bins[1])
	if !maps.Equal(a, b) {
		t.Fatalf("the two builds' functions differ: %v and %v", a, b)
	}
	// On CPUs of their own, each CPU would sample one of them only.
	var cpu0 unix.CPUSet
	cpu0.Set(0)
	var cmds []*exec.Cmd
	for _, bin := range bins {
		cmd := startWorkload(t, bin)
		if err := unix.SchedSetaffinity(cmd.Process.Pid, &cpu0); err != nil {
			t.Fatalf("pinning pid %d to CPU 0: %v", cmd.Process.Pid, err)
		}
		cmds = append(cmds, cmd)
	}
	run := profileWithCFI(t, 5*time.Second, cmds...)
	for _, cmd := range cmds {
		checkChain(t, run.samplesOf(cmd.Process.Pid), []string{"hot", "mid", "outer", "main"}, 0.99)
	}
}

// funcAddrs returns the addresses of sameaddr.c's functions in bin, which
// must be an executable at a fixed address (non-PIE).
func funcAddrs(t *testing.T, bin string) map[string]uint64 {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		t.Fatalf("%s: %v, not a fixed-address executable", bin, f.Type)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	out := map[string]uint64{}
	for _, s := range syms {
		switch s.Name {
		case "hot", "mid", "outer", "main":
			out[s.Name] = s.Value
		}
	}
	if len(out) != 4 {
		t.Fatalf("%s: functions %v, want hot, mid, outer and main", bin, out)
	}
	return out
}

// TestAlternatingChainsOneThread profiles one thread that alternates, call
// by call, between two chains whose frames lie at other depths of the same
// stack: each sample finds there what the other chain wrote. A walk that
// read the stack as an earlier sample copied it (the sampler keeps the
// page of stack it last read) would follow the other chain's words.
func TestAlternatingChainsOneThread(t *testing.T) {
	bin := testworkload.BuildC(t, "altchains.c", noFramePointers...)
	cmd := startWorkload(t, bin)
	run := profileWithCFI(t, 5*time.Second, cmd)
	var wide, narrow []pprofiletest.Sample
	var all, neither int64
	for _, s := range run.samplesOf(cmd.Process.Pid) {
		all += s.Count
		switch names := s.UserNames(); {
		case slices.Contains(names, "wide"):
			wide = append(wide, s)
		case slices.Contains(names, "narrow"):
			narrow = append(narrow, s)
		default:
			neither += s.Count
		}
	}
	t.Logf("%d samples: %d hold neither chain", all, neither)
	if all == 0 || neither*100 > all {
		t.Fatalf("%d of %d samples hold neither chain (1%% allowed)", neither, all)
	}
	checkChain(t, wide, []string{"hot", "wide", "main"}, 0.99)
	checkChain(t, narrow, []string{"hot", "narrow", "main"}, 0.99)
}
