package ebpfprofreceiver

import (
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

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
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	ex, err := link.OpenExecutable(bin)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ex.Uretprobe("leaf", prog, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

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
