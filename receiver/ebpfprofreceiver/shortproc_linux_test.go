package ebpfprofreceiver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestShortLivedProcessesNamed runs a few hundred children that each live
// about 20 ms, exec'd one after the other, at the highest sampling
// frequency: every child is gone long before the drain reads its samples.
// Their user frames must still be mapped and named (from the mappings
// read at exec), the child's own function in nearly all of their samples.
func TestShortLivedProcessesNamed(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "shortproc.c", "-O1", "-g", "-fno-omit-frame-pointer")
	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = maxSamplingFrequency
	cfg.ReportInterval = time.Second
	r := startProfilesReceiver(t, cfg, sink)
	const children = 300
	cmd := testworkload.Start(t, bin, "300")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("workload: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Errorf("workload did not finish its %d children", children)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	checkNoImpossibleFrames(t, sink.AllProfiles())

	parent := int64(cmd.Process.Pid)
	pids := map[int64]struct{}{}
	// named: every user frame named; own: the child's own function among
	// them (the rest are ld.so's start-up and exit's).
	var total, named, own int64
	var unnamed [][]string
	for _, p := range sink.AllProfiles() {
		for _, s := range pprofiletest.Samples(p) {
			// The children run as "shortproc" too: after the fork, and
			// after exec (comm is the binary's name).
			if s.PID == parent || s.Labels[conventions.ThreadName] != "shortproc" {
				continue
			}
			pids[s.PID] = struct{}{}
			total += s.Count
			user := s.UserNames()
			if slices.Contains(user, "shortproc_child_spin") {
				own += s.Count
			}
			if len(user) > 0 && !slices.Contains(user, "") {
				named += s.Count
			} else if len(unnamed) < 8 {
				unnamed = append(unnamed, append(user, "|", shortChain(s.KernelNames())))
			}
		}
	}
	// Each child spins about 20 ms at the highest frequency: one with no
	// sample at all is a child whose samples were lost.
	if total < 500 || len(pids) < children*9/10 {
		t.Fatalf("only %d samples of %d children (of %d run)", total, len(pids), children)
	}
	ratio, ownRatio := float64(named)/float64(total), float64(own)/float64(total)
	t.Logf("%d of %d samples of %d short-lived children have all user frames named (%.1f%%), %d name shortproc_child_spin (%.1f%%)",
		named, total, len(pids), 100*ratio, own, 100*ownRatio)
	st := r.snapshots.Stats()
	t.Logf("snapshots: taken %d, expired %d, dropped %d, files not held %d", st.Taken, st.Expired, st.Dropped, st.FilesNotHeld)
	// Measured: 94.8-95.9% named, 94.1-95.3% in the child's own function.
	// The rest are samples past exit_mmap, with no user stack left, and
	// ld.so's start-up, whose root (_start, a sizeless NOTYPE label in
	// ld.so) no symbol covers.
	if ratio < 0.92 || ownRatio < 0.90 {
		t.Fatalf("only %.1f%% of the children's samples have all user frames named, %.1f%% their own function; some unnamed (user | kernel): %q",
			100*ratio, 100*ownRatio, unnamed)
	}
}

// TestShortProcessesCompleteFromFirstSample runs short xz processes (a
// real distribution program, without frame pointers: only CFI walks its
// stacks through liblzma and libc) one after the other, once an earlier xz
// had the tables of its files built. Each new process maps files whose
// tables exist: its samples must be complete from its first, though it is
// gone long before its samples are read.
func TestShortProcessesCompleteFromFirstSample(t *testing.T) {
	testenv.RequireBPF(t)
	xz := testenv.LookPath(t, "xz")
	data := filepath.Join(t.TempDir(), "data")
	var buf bytes.Buffer
	for i := 0; buf.Len() < 1<<20; i++ {
		fmt.Fprintf(&buf, "sample %d of a stack %d frames deep\n", i, i%97)
	}
	if err := os.WriteFile(data, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func() int {
		t.Helper()
		cmd := exec.Command(xz, "-6", "-T1", "-c", data)
		cmd.Stdout = io.Discard
		if err := cmd.Run(); err != nil {
			t.Fatalf("xz: %v", err)
		}
		return cmd.Process.Pid
	}
	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	r := startProfilesReceiver(t, cfg, sink)
	// Earlier xz processes run until a sample of one is reported
	// complete, so their files' tables are built; then they serve the
	// next.
	earlier := map[int64]bool{}
	for deadline := time.Now().Add(30 * time.Second); !completeSampleOf(sink, earlier); {
		if time.Now().After(deadline) {
			t.Fatalf("no complete sample of %d xz processes within 30 s: tables %+v", len(earlier), r.unwind.Stats())
		}
		earlier[int64(run())] = true
	}
	pids := map[int64]bool{}
	for range 20 {
		pids[int64(run())] = true
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var total, complete, noUserStack int64
	var some []string
	for _, p := range sink.AllProfiles() {
		for _, s := range pprofiletest.Samples(p) {
			if !pids[s.PID] || s.SampleType != "samples/count" {
				continue
			}
			user := s.UserNames()
			if len(user) == 0 && inExecOrExit(s.KernelNames()) {
				// In execve before the new image runs, or in
				// exit_group after it unmapped its memory: there is no
				// user stack to walk.
				noUserStack += s.Count
				continue
			}
			total += s.Count
			if completeXZ(user) {
				complete += s.Count
			} else if len(some) < 5 {
				some = append(some, fmt.Sprintf("[%s] kernel [%s]", joinNames(user), joinNames(s.KernelNames())))
			}
		}
	}
	if total < 100 {
		t.Fatalf("only %d samples of %d xz processes", total, len(pids))
	}
	t.Logf("%d of %d samples of %d short xz processes complete (%.1f%%); %d more in execve or exit_group, with no user stack", complete, total, len(pids), pct(complete, total), noUserStack)
	// The goal of issue 23; loaded only after a first sample was read,
	// tables left the first half second of each process to frame
	// pointers (83.9% complete, under load 96.7%).
	if pct(complete, total) < 98 {
		t.Fatalf("%.1f%% of the samples of short processes are complete; some that are not: %v", pct(complete, total), some)
	}
}

// completeXZ says whether an xz sample's user stack reached the root of
// the thread: libc's start of main (named by libc's debug file; the
// stripped xz's _start above it has no name), or, before main, ld.so's
// _dl_start, which ld.so's own _start (unnamed) calls.
func completeXZ(user []string) bool {
	return reachesMain(user) || (len(user) >= 2 && user[len(user)-2] == "_dl_start" && user[len(user)-1] == "")
}

// reachesMain says whether an xz sample's user stack reached libc's start
// of main.
func reachesMain(user []string) bool { return slices.Contains(user, "__libc_start_call_main") }

// inExecOrExit says whether a sample's kernel stack is in execve (loading
// the new image) or in exit_group.
func inExecOrExit(kernel []string) bool {
	return slices.Contains(kernel, "bprm_execve") || slices.Contains(kernel, "do_exit")
}

// completeSampleOf says whether sink holds a complete sample of one of the
// xz processes pids.
func completeSampleOf(sink *consumertest.ProfilesSink, pids map[int64]bool) bool {
	for _, p := range sink.AllProfiles() {
		for _, s := range pprofiletest.Samples(p) {
			if pids[s.PID] && reachesMain(s.UserNames()) {
				return true
			}
		}
	}
	return false
}
