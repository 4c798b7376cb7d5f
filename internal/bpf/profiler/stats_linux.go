//go:build linux && (amd64 || arm64)

package profiler

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfcol/bpfcol/internal/process"
)

// eventTarget is one perf event to open: a CPU (pid -1), or a thread on
// any CPU (cpu -1).
type eventTarget struct{ pid, cpu int }

func eventTargets(opts Options, cpus []int) ([]eventTarget, error) {
	pids := opts.PIDs
	if opts.PID != 0 {
		pids = append([]int{opts.PID}, pids...)
	}
	if len(pids) == 0 {
		targets := make([]eventTarget, len(cpus))
		for i, cpu := range cpus {
			targets[i] = eventTarget{-1, cpu}
		}
		return targets, nil
	}
	var targets []eventTarget
	for _, pid := range pids {
		tids, err := process.ThreadIDs(pid)
		if err != nil {
			return nil, err
		}
		for _, tid := range tids {
			targets = append(targets, eventTarget{tid, -1})
		}
	}
	return targets, nil
}

// RunStats returns how long the sampling program ran in total and how
// often, while kernel BPF statistics are enabled (ebpf.EnableStats or
// kernel.bpf_stats_enabled).
func (s *Sampler) RunStats() (time.Duration, uint64, error) {
	st, err := s.objs.SampleStack.Stats()
	if err != nil {
		return 0, 0, fmt.Errorf("reading sampler program stats: %w", err)
	}
	return st.Runtime, st.RunCount, nil
}

// OffCPURunStats is RunStats for the off-CPU program: divided, the BPF time
// per context switch.
func (s *Sampler) OffCPURunStats() (time.Duration, uint64, error) {
	if s.offCPUSwitch == nil {
		return 0, 0, errors.New("reading off-CPU program stats: off-CPU events are not enabled")
	}
	st, err := s.offCPUSwitch.Stats()
	if err != nil {
		return 0, 0, fmt.Errorf("reading off-CPU program stats: %w", err)
	}
	return st.Runtime, st.RunCount, nil
}

// OffCPUWalkStats returns how long the task work that walks off-CPU user
// stacks ran in total and how often. A task work callback is no program of
// its own, so the kernel's statistics miss it: the callback times itself,
// always. Both are zero where the walk runs in sched_switch (OffCPUTaskWork
// false), inside OffCPURunStats.
func (s *Sampler) OffCPUWalkStats() (time.Duration, uint64, error) {
	if s.offCPUSwitch == nil {
		return 0, 0, errors.New("reading off-CPU walk stats: off-CPU events are not enabled")
	}
	return selfTimed(s.objs.OffCpuWalkNs, s.objs.OffCpuWalks, "off-CPU walk")
}

// selfTimed reads the time and the runs that a task work callback counts
// of itself, in the variables ns and runs.
func selfTimed(ns, runs *ebpf.Variable, what string) (time.Duration, uint64, error) {
	var t, n uint64
	if err := ns.Get(&t); err != nil {
		return 0, 0, fmt.Errorf("reading %s time: %w", what, err)
	}
	if err := runs.Get(&n); err != nil {
		return 0, 0, fmt.Errorf("reading %s count: %w", what, err)
	}
	return time.Duration(t), n, nil
}

// ComposeStats returns how long the task work that reads processes'
// mappings (and walks their first sample) ran in total and how often. A
// task work callback is no program of its own, so the kernel's statistics
// miss it: the callback times itself, always.
func (s *Sampler) ComposeStats() (time.Duration, uint64, error) {
	return selfTimed(s.objs.ComposeWalkNs, s.objs.ComposeWalks, "mapping read")
}
