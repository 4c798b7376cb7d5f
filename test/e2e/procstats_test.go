package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// treeTicks sums the CPU time of pid and its live descendants in clock
// ticks: utime and stime, plus cutime and cstime for the children each has
// already reaped.
func treeTicks(b *testing.B, pid int) int64 {
	b.Helper()
	var total int64
	for _, p := range append([]int{pid}, descendants(pid)...) {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			if p == pid {
				b.Fatal(err)
			}
			continue // exited since it was listed
		}
		// The command name may hold spaces: fields start after the last ')'.
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
		for _, f := range fields[11:15] {
			v, _ := strconv.ParseInt(f, 10, 64)
			total += v
		}
	}
	return total
}

// descendants lists the live descendants of pid, from each thread's
// children file.
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		data, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

// bpfRunStats is what the kernel's BPF statistics say of the programs one
// process holds.
type bpfRunStats struct {
	programs int
	// runtimeNs is the run time of all of them; tail-called programs count
	// in the program that called them.
	runtimeNs uint64
	// samples is how often its perf_event programs ran: one run per
	// sample; samplingNs is their run time.
	samples, samplingNs uint64
}

// bpfProgPerfEvent is BPF_PROG_TYPE_PERF_EVENT in fdinfo's prog_type.
const bpfProgPerfEvent = 7

// processBPFStats sums the statistics of the BPF programs pid holds open,
// from /proc/PID/fdinfo. Kernel statistics must be enabled
// (enableBPFStats). A program attached through a link whose program fd
// was closed would be missed, so it fails then rather than undercount.
func processBPFStats(b *testing.B, pid int) bpfRunStats {
	b.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		b.Fatal(err)
	}
	var st bpfRunStats
	progs := map[string]bool{}
	var linked []string
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil || (target != "anon_inode:bpf-prog" && target != "anon_inode:bpf_link") {
			continue
		}
		info, err := fdinfo(pid, fd.Name())
		if err != nil {
			b.Fatal(err)
		}
		id := info["prog_id"]
		if target == "anon_inode:bpf_link" {
			linked = append(linked, id)
			continue
		}
		if progs[id] {
			continue
		}
		progs[id] = true
		rt, err1 := strconv.ParseUint(info["run_time_ns"], 10, 64)
		n, err2 := strconv.ParseUint(info["run_cnt"], 10, 64)
		if err1 != nil || err2 != nil {
			b.Fatalf("fdinfo of BPF program %s of pid %d has no run_time_ns/run_cnt: %v", id, pid, info)
		}
		st.programs++
		st.runtimeNs += rt
		if info["prog_type"] == strconv.Itoa(bpfProgPerfEvent) {
			st.samples += n
			st.samplingNs += rt
		}
	}
	for _, id := range linked {
		if !progs[id] {
			b.Fatalf("pid %d holds a link to BPF program %s but no fd of the program: its statistics would be missed", pid, id)
		}
	}
	return st
}

// fdinfo reads /proc/PID/fdinfo/FD as key: value pairs.
func fdinfo(pid int, fd string) (map[string]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			kv[k] = strings.TrimSpace(v)
		}
	}
	return kv, sc.Err()
}

const bpfStatsSysctl = "/proc/sys/kernel/bpf_stats_enabled"

// enableBPFStats turns kernel.bpf_stats_enabled on for the benchmark, and
// back to what it was at cleanup.
func enableBPFStats(b *testing.B) {
	b.Helper()
	old, err := os.ReadFile(bpfStatsSysctl)
	if err != nil {
		b.Fatalf("reading kernel.bpf_stats_enabled: %v", err)
	}
	if err := os.WriteFile(bpfStatsSysctl, []byte("1\n"), 0); err != nil {
		b.Fatalf("enabling kernel.bpf_stats_enabled: %v", err)
	}
	b.Cleanup(func() {
		if err := os.WriteFile(bpfStatsSysctl, old, 0); err != nil {
			b.Errorf("restoring kernel.bpf_stats_enabled to %s: %v", strings.TrimSpace(string(old)), err)
		}
	})
}
