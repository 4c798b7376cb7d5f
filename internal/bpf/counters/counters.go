// Package counters reads the per-CPU counters map that bpfcol's BPF
// programs share (internal/bpf/c/include/bpfcol_counters.h).
package counters

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Sum returns, for each counter index 0..n-1 of m, its total over all CPUs.
// It keeps no state, so concurrent callers (a metrics reader and Shutdown)
// need no lock.
func Sum(m *ebpf.Map, n int) ([]uint64, error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("counting possible cpus: %w", err)
	}
	percpu := make([]uint64, ncpu)
	totals := make([]uint64, n)
	for idx := range totals {
		if err := m.Lookup(uint32(idx), &percpu); err != nil {
			return nil, fmt.Errorf("reading counter %d: %w", idx, err)
		}
		for _, v := range percpu {
			totals[idx] += v
		}
	}
	return totals, nil
}
