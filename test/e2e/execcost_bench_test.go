package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// cpuNs sums the on-CPU time of pid's threads in nanoseconds, from
// /proc/PID/task/*/schedstat: finer than stat's clock ticks.
func cpuNs(b *testing.B, pid int) int64 {
	b.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("no threads of pid %d: %v", pid, err)
	}
	var total int64
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // exited since it was listed
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			continue
		}
		ns, _ := strconv.ParseInt(f[0], 10, 64)
		total += ns
	}
	return total
}

// programRuns returns the run time and count, in the kernel's BPF
// statistics (enableBPFStats), of the BPF programs named name that pid
// holds.
func programRuns(b *testing.B, pid int, name string) (time.Duration, uint64) {
	b.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		b.Fatal(err)
	}
	var rt time.Duration
	var runs uint64
	seen := map[ebpf.ProgramID]bool{}
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err != nil || target != "anon_inode:bpf-prog" {
			continue
		}
		info, err := fdinfo(pid, fd.Name())
		if err != nil {
			b.Fatal(err)
		}
		id, _ := strconv.ParseUint(info["prog_id"], 10, 32)
		if seen[ebpf.ProgramID(id)] {
			continue
		}
		seen[ebpf.ProgramID(id)] = true
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			b.Fatal(err)
		}
		pi, err := prog.Info()
		if err != nil || pi.Name != name {
			prog.Close()
			continue
		}
		st, err := prog.Stats()
		prog.Close()
		if err != nil {
			b.Fatal(err)
		}
		rt += st.Runtime
		runs += st.RunCount
	}
	if len(seen) == 0 {
		b.Fatalf("pid %d holds no BPF program", pid)
	}
	return rt, runs
}

// execRounds is how many idle and exec windows BenchmarkPerExecCost takes.
const execRounds = 3

// BenchmarkPerExecCost measures what a process that bin/bpfcol never
// samples costs it: its CPU time over a window of execs of a tiny static
// program (each exits at once, one after the other, so that almost none is
// sampled), less its CPU time over the idle window as long just before,
// per exec: the median of execRounds such pairs. It reports too the time
// the kernel spent in bpfcol's BPF program at each exiting process (run in
// that process, not in bpfcol), and how many of the execs were sampled. A
// busy workload runs through every window: the benchmark fails unless
// bpfcol exported its samples of the exec windows, 20 a second of its CPU
// time.
func BenchmarkPerExecCost(b *testing.B) {
	testenv.RequireBPF(b)
	exitnow := testworkload.BuildC(b, "exitnow.c", "-O2", "-static")
	loop := testworkload.BuildC(b, "execloop.c", "-O2")
	hog := testworkload.Start(b, testworkload.BuildC(b, "cpuhog.c", testworkload.CPUHogFlags()...))
	window := max(benchSeconds(b)/(2*execRounds), 5*time.Second)
	enableBPFStats(b)
	for b.Loop() {
		server := startProfilesServer(b)
		col := startCollector(b, strings.Replace(profilesConfig(server.addr), "sampling_frequency: 99\n    report_interval: 1s",
			fmt.Sprintf("sampling_frequency: %d\n    report_interval: %s", overheadHz, overheadReport), 1))
		for deadline := time.Now().Add(90 * time.Second); len(server.all()) == 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("bpfcol exported nothing within 90s:\n%s", col.output)
			}
		}
		time.Sleep(warmUp)
		pid := col.cmd.Process.Pid

		// Rounds of an idle window, then an exec window as long: each
		// exec window is measured against the idle one just before it, so
		// that the rest of the host, which bpfcol samples too, changes
		// little between the two; the median round is reported.
		var perExec, idlePct, execPct []float64
		var execs, hogTicks int64
		var busy time.Duration
		var windows [][2]time.Time
		exitRT0, exitRuns0 := programRuns(b, pid, "proc_exit")
		for range execRounds {
			idle0, idleFrom := cpuNs(b, pid), time.Now()
			time.Sleep(window)
			idle, idle1 := time.Since(idleFrom), cpuNs(b, pid)

			hog0, from := cpuTicks(b, hog.Process.Pid), time.Now()
			out, err := exec.Command(loop, strconv.FormatFloat(window.Seconds(), 'f', 3, 64), exitnow).Output()
			if err != nil {
				b.Fatalf("exec loop: %v", err)
			}
			to, execs1 := time.Now(), cpuNs(b, pid)
			hogTicks += cpuTicks(b, hog.Process.Pid) - hog0
			n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
			if err != nil || n == 0 {
				b.Fatalf("exec loop printed %q", out)
			}
			execs += n
			busy += to.Sub(from)
			windows = append(windows, [2]time.Time{from, to})
			idleRate := float64(idle1-idle0) / idle.Seconds() // ns of CPU per second
			perExec = append(perExec, (float64(execs1-idle1)-idleRate*to.Sub(from).Seconds())/float64(n)/1000)
			idlePct = append(idlePct, 100*idleRate/1e9)
			execPct = append(execPct, 100*float64(execs1-idle1)/to.Sub(from).Seconds()/1e9)
		}
		exitRT1, exitRuns1 := programRuns(b, pid, "proc_exit")

		// bpfcol must have kept sampling: the busy workload's samples, 20
		// a second of its CPU time in the exec windows, less one sample
		// period at each report interval's edges.
		last := windows[len(windows)-1][1]
		for deadline := last.Add(3*overheadReport + 10*time.Second); latestSample(server).Before(last.Add(overheadReport)); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("bpfcol exported no sample taken after %s", last.Add(overheadReport).Format(time.TimeOnly))
			}
		}
		var hogSamples int64
		sampled := map[int64]bool{}
		for _, w := range windows {
			for _, s := range windowSamples(b, server, w[0], w[1]) {
				switch {
				case s.PID == int64(hog.Process.Pid):
					hogSamples += s.Count
				case s.Labels[conventions.ThreadName] == "exitnow":
					sampled[s.PID] = true
				}
			}
		}
		edges := int64(len(windows)) * 2 * int64(window/overheadReport+2)
		if want := int64(overheadHz*float64(hogTicks)/clockTicksPerSecond) - edges; hogSamples < want {
			b.Fatalf("bpfcol exported %d samples of the busy workload over %s, want at least %d (%d Hz of its %d ticks)", hogSamples, busy, want, overheadHz, hogTicks)
		}

		median := func(v []float64) float64 {
			v = slices.Clone(v)
			slices.Sort(v)
			return v[len(v)/2]
		}
		b.ReportMetric(median(perExec), "bpfcol_us/exec")
		b.ReportMetric(float64(execs)/busy.Seconds(), "execs/s")
		b.ReportMetric(median(idlePct), "bpfcol_idle_%core")
		b.ReportMetric(median(execPct), "bpfcol_execs_%core")
		b.ReportMetric(float64(len(sampled))/float64(execs), "execs_sampled/exec")
		exitNsPerRun := 0.0
		if exitRuns1 > exitRuns0 {
			exitNsPerRun = float64((exitRT1 - exitRT0).Nanoseconds()) / float64(exitRuns1-exitRuns0)
			b.ReportMetric(exitNsPerRun, "exit_bpf_ns/run")
		}
		b.Logf("%d execs in %s (%.0f/s), %d rounds: µs per exec %.2f (median of %.2f), bpfcol %% of a core idle %.3f, with the execs %.3f; %d of the execs sampled; its exit program %.0f ns per thread exit (%d runs); load average %.2f",
			execs, busy.Round(time.Millisecond), float64(execs)/busy.Seconds(), execRounds, median(perExec), perExec,
			median(idlePct), median(execPct), len(sampled), exitNsPerRun, exitRuns1-exitRuns0, loadAverage())
	}
}
