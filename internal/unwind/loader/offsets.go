package loader

import (
	"sort"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// fileOffsetRows places rows, whose PCs are ELF virtual addresses, in the
// file's offsets, where the sampler looks them up: a mapping tells where
// the file's offset 0 lies in memory, so no load bias, and no ELF header,
// is needed in BPF. It returns the rows to write, relative to their first
// PC, and the file offset of that first PC. When every executable segment
// has the same address-to-offset delta (the usual case) the rows are
// returned as they are; otherwise each is moved by its segment's delta,
// those in no executable segment dropped.
func fileOffsetRows(rows []cfi.Row, m *elfbin.AddressMapper) ([]cfi.Row, uint64, bool) {
	if len(rows) == 0 || !m.HasExec() {
		return nil, 0, false
	}
	if delta, ok := m.ExecDelta(); ok {
		return rows, rows[0].PC - delta, true
	}
	out := make([]cfi.Row, 0, len(rows))
	for _, r := range rows {
		if off, ok := m.CodeOffset(r.PC); ok {
			r.PC = off
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, 0, false
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PC < out[j].PC })
	return out, out[0].PC, true
}
