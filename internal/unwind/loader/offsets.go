package loader

import (
	"debug/elf"
	"sort"

	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// execSegments returns the executable loadable segments of ef.
func execSegments(ef *elf.File) []elf.ProgHeader {
	var out []elf.ProgHeader
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			out = append(out, p.ProgHeader)
		}
	}
	return out
}

// fileOffsetRows places rows, whose PCs are ELF virtual addresses, in the
// file's offsets, where the sampler looks them up: a mapping tells where
// the file's offset 0 lies in memory, so no load bias, and no ELF header,
// is needed in BPF. It returns the rows to write, relative to their first
// PC, and the file offset of that first PC. When every executable segment
// has the same address-to-offset delta (the usual case) the rows are
// returned as they are; otherwise each is moved by its segment's delta,
// those in no executable segment dropped.
func fileOffsetRows(rows []cfi.Row, segs []elf.ProgHeader) ([]cfi.Row, uint64, bool) {
	if len(rows) == 0 || len(segs) == 0 {
		return nil, 0, false
	}
	delta := segs[0].Vaddr - segs[0].Off
	same := true
	for _, p := range segs[1:] {
		same = same && p.Vaddr-p.Off == delta
	}
	if same {
		return rows, rows[0].PC - delta, true
	}
	out := make([]cfi.Row, 0, len(rows))
	for _, r := range rows {
		for _, p := range segs {
			// A segment's end holds the row that ends its last function.
			if r.PC >= p.Vaddr && r.PC <= p.Vaddr+p.Memsz {
				r.PC -= p.Vaddr - p.Off
				out = append(out, r)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, 0, false
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PC < out[j].PC })
	return out, out[0].PC, true
}
