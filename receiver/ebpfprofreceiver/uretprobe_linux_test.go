package ebpfprofreceiver

import (
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestNoFrameAtUretprobeTrampoline profiles new processes whose frameless
// leaf runs under a uretprobe. The kernel put the trampoline, the first
// byte of [uprobes], in place of the leaf's return address, where the
// frame-pointer walk of a process whose tables are not loaded yet looks
// for the caller the leaf hid: no frame may come of it (it was a location
// at 0x7fffffffdfff in no mapping).
func TestNoFrameAtUretprobeTrampoline(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "uretleaf.c", "-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer")
	attachUretprobes(t, bin, "leaf")

	// New processes all along: each is walked by frame pointers until its
	// tables are loaded.
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = exec.Command(bin, "300").Run()
		}
	}()
	defer func() { close(stop); <-done }()
	cmd := startWorkload(t, bin, "60000")
	run := profileWithCFI(t, 3*time.Second, cmd) // checks for impossible frames

	var inLeaf int64
	for _, p := range run.sink.all {
		for _, s := range pprofiletest.Samples(p) {
			if names := s.UserNames(); s.PID != int64(cmd.Process.Pid) && len(names) > 0 && names[0] == "leaf" {
				inLeaf += s.Count
			}
		}
	}
	t.Logf("%d samples in leaf of the short-lived processes", inLeaf)
	if inLeaf < 20 {
		t.Fatalf("only %d samples in leaf of the short-lived processes: the uretprobe's trampoline was hardly walked by", inLeaf)
	}
}

// attachUretprobes puts a uretprobe of its own on each of fns in bin: a
// plain cilium/ebpf program that does nothing, as a foreign tracer (bpftrace,
// another profiler) would place. They are detached when the test ends.
func attachUretprobes(t *testing.T, bin string, fns ...string) {
	t.Helper()
	testenv.RequireBPF(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	ex, err := link.OpenExecutable(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range fns {
		l, err := ex.Uretprobe(fn, prog, nil)
		if err != nil {
			t.Fatalf("uretprobe on %s: %v", fn, err)
		}
		t.Cleanup(func() { l.Close() })
	}
}

// TestCFIThroughForeignUretprobes profiles a program without frame pointers
// whose functions run under someone else's uretprobes: the kernel replaced
// the return address of c2, c4 and the leaf hot with its trampoline in
// every stack. Each is taken back from the kernel's return instances, so
// the stacks are whole, every frame in its place.
func TestCFIThroughForeignUretprobes(t *testing.T) {
	bin := testworkload.BuildC(t, "deepchain.c", noFramePointers...)
	attachUretprobes(t, bin, "c2", "c4", "hot")
	cmd := startWorkload(t, bin)
	run := profileWithCFI(t, 5*time.Second, cmd)
	chain := []string{"hot", "c6", "c5", "c4", "c3", "c2", "c1", "main"}
	samples := run.samplesOf(cmd.Process.Pid)
	checkChain(t, samples, chain, 0.95)
	for _, s := range samples {
		if names := s.UserNames(); len(names) > 0 && names[0] == "hot" && completeStack(names) &&
			!slices.Equal(names[:min(len(names), len(chain))], chain) {
			t.Fatalf("a frame out of place: %v", names)
		}
	}
	// Host-wide: other processes' walks count too.
	t.Logf("walks cut at a trampoline on the host: %d", run.counters.UnwindStops[profiler.StopUretprobe])
}

// TestCFIThroughChainedUretprobes puts uretprobes on a recursive function
// (eight return instances, one per frame, matched by their stack slot) and
// on a function that tail-calls another probed one (the second's entry
// finds the trampoline already in the slot: a chained instance holding the
// first's address).
func TestCFIThroughChainedUretprobes(t *testing.T) {
	bin := testworkload.BuildC(t, "uretrec.c", noFramePointers...)
	attachUretprobes(t, bin, "spin", "rec", "tail_a", "tail_b")
	cmd := startWorkload(t, bin)
	run := profileWithCFI(t, 5*time.Second, cmd)
	chain := []string{"spin", "rec", "rec", "rec", "rec", "rec", "rec", "rec", "rec", "tail_b", "main"}
	checkChain(t, run.samplesOf(cmd.Process.Pid), chain, 0.95)
	// Host-wide: other processes' walks count too.
	t.Logf("walks cut at a trampoline on the host: %d", run.counters.UnwindStops[profiler.StopUretprobe])
}
