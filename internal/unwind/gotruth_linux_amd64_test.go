package unwind

import (
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// traceGoTruth runs bin under ptrace and single-steps its main thread
// (which runs the runtime's start-up, then goroutines) for up to steps
// instructions or budget. At every PC whose CFA is RSP-based and beyond
// the return address alone, the registers decide, not the code: the
// function has its frame set up exactly when RBP holds CFA−16 (the FP
// walk then finds its caller), else the return address is at CFA−8 from
// RSP. Go's CFI describes the CFA only, never RBP, so the static truth
// for these PCs would be a guess from the instructions: the analyser's
// own reasoning.
func traceGoTruth(t *testing.T, bin string, fdes []*fde, steps int, budget time.Duration) observedTruth {
	t.Helper()
	sort.Slice(fdes, func(i, j int) bool { return fdes[i].lo < fdes[j].lo })
	cfaAt := func(pc uint64) string {
		i := sort.Search(len(fdes), func(i int) bool { return fdes[i].hi > pc })
		if i == len(fdes) || pc < fdes[i].lo {
			return ""
		}
		return fdes[i].cfaAt(pc)
	}
	// ptrace requests must come from the thread that traces.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(bin, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s under ptrace: %v", bin, err)
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		_ = cmd.Wait()
	}()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		t.Fatalf("waiting for the exec stop of %s: %v (%v)", bin, err, ws)
	}
	obs := observedTruth{at: map[uint64]truth{}}
	bad := map[uint64]bool{}
	deadline := time.Now().Add(budget)
	sig := 0
	var regs unix.PtraceRegs
	for obs.steps < steps && time.Now().Before(deadline) {
		// PTRACE_SINGLESTEP with the signal that stopped the thread, if
		// any, delivered (the runtime's preemption signals).
		if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SINGLESTEP, uintptr(pid), 0, uintptr(sig), 0, 0); e != 0 {
			t.Fatalf("single-stepping pid %d: %v", pid, e)
		}
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
			t.Fatalf("waiting for pid %d: %v", pid, err)
		}
		if ws.Exited() || ws.Signaled() {
			break
		}
		sig = 0
		if s := ws.StopSignal(); s != unix.SIGTRAP {
			sig = int(s)
			continue
		}
		obs.steps++
		if err := unix.PtraceGetRegs(pid, &regs); err != nil {
			t.Fatalf("reading the registers of pid %d: %v", pid, err)
		}
		cfa := cfaAt(regs.Rip)
		off, ok := strings.CutPrefix(cfa, "rsp+")
		if !ok || cfa == "rsp+8" || bad[regs.Rip] {
			continue
		}
		n, err := strconv.ParseUint(off, 10, 64)
		if err != nil {
			continue
		}
		var want truth
		switch cfaAddr := regs.Rsp + n; {
		case regs.Rbp == cfaAddr-16:
			want = truthFrame
		case n == 16:
			want = truthSlot8
		default:
			want = truthNone
		}
		if old, seen := obs.at[regs.Rip]; seen && old != want {
			delete(obs.at, regs.Rip)
			bad[regs.Rip] = true
			obs.inconsistent++
			continue
		}
		obs.at[regs.Rip] = want
	}
	return obs
}

// TestGroundTruthGo compares the analysis of every function of a Go
// program with its CFI (.debug_frame) where the CFI decides (rsp+8: the
// return address at [SP]), and with the registers of the running program
// where it cannot (whether the frame is set up): the program's main
// thread is single-stepped through the runtime's start-up and its hot
// loop.
func TestGroundTruthGo(t *testing.T) {
	bin := testworkload.BuildGo(t, "gohog")
	fdes := readCFI(t, bin)
	start := time.Now()
	obs := traceGoTruth(t, bin, fdes, 150000, 10*time.Second)
	var frames, slots, none int
	for _, w := range obs.at {
		switch w {
		case truthFrame:
			frames++
		case truthSlot8:
			slots++
		default:
			none++
		}
	}
	t.Logf("single-stepped %d instructions in %s: %d PCs observed (%d with the frame set up, %d with the return address at [SP+8], %d neither), %d seen both ways",
		obs.steps, time.Since(start).Round(time.Millisecond), len(obs.at), frames, slots, none, obs.inconsistent)
	// 7601 and 145 measured: a run that saw far fewer checked little.
	if frames < 3000 || slots < 50 {
		t.Fatalf("the run showed %d PCs with a frame set up and %d with the return address at [SP+8], want at least 3000 and 50", frames, slots)
	}
	c := compareWithCFI(t, bin, &obs)
	t.Logf("gohog (all functions, .debug_frame; the registers where the CFI cannot tell): %v", c)
	checkCoverage(t, c)
}
