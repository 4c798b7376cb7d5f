//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"fmt"

	"github.com/bpfcol/bpfcol/internal/bpf/counters"
)

// Counters sums the BPF counters over all CPUs.
func (p *Probes) Counters() (Counters, error) {
	v, err := counters.Sum(p.objs.Counters, int(uprobeCounterCOUNTER_MAX))
	if err != nil {
		return Counters{}, fmt.Errorf("reading scope counters: %w", err)
	}
	return Counters{
		Records:          v[uprobeCounterCOUNTER_RECORDS],
		LostRingbuf:      v[uprobeCounterCOUNTER_LOST_RINGBUF],
		ExitWithoutEntry: v[uprobeCounterCOUNTER_EXIT_NO_ENTRY],
		Short:            v[uprobeCounterCOUNTER_SHORT],
		ScopeFull:        v[uprobeCounterCOUNTER_SCOPE_FULL],
		ReturnUnprobed:   v[uprobeCounterCOUNTER_RETURN_UNPROBED],
		Filtered:         v[uprobeCounterCOUNTER_FILTERED],
	}, nil
}
