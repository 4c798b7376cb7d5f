//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Benchmark support, kept apart from the probes themselves: the record
// filler (Options.LoadFiller, Fill) and empty programs
// (Options.EmptyPrograms). Benchmarks of other packages use both, so they
// cannot live in test files.

// prepareBenchmarkPrograms drops the fill program unless asked for, and
// empties the scope programs when asked.
func prepareBenchmarkPrograms(spec *ebpf.CollectionSpec, opts Options) {
	if !opts.LoadFiller {
		delete(spec.Programs, uprobeProgFillRecords)
	}
	if opts.EmptyPrograms {
		for _, name := range []string{uprobeProgScopeEntry, uprobeProgScopeExit} {
			spec.Programs[name].Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
		}
	}
}

// Fill writes count synthetic records of probeID into the ringbuf from BPF
// (BPF_PROG_TEST_RUN), to benchmark the user-space path. It needs
// Options.LoadFiller.
func (p *Probes) Fill(count, probeID uint32) error {
	if p.objs.FillRecords == nil {
		return errors.New("filling records: loaded without LoadFiller")
	}
	args := uprobeFillArgs{Count: count, ProbeId: probeID}
	ctx := unsafe.Slice((*byte)(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	if _, err := p.objs.FillRecords.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
		return fmt.Errorf("filling records: %w", err)
	}
	return nil
}
