package profiler

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// rowBatch bounds the rows written in one BPF_MAP_UPDATE_BATCH.
const rowBatch = 1 << 14

func init() {
	// The Go mirror of struct unwind_row must stay the generated one.
	if unsafe.Sizeof(encodedRow{}) != unsafe.Sizeof(profilerUnwindRow{}) || UnwindRowBytes != unsafe.Sizeof(encodedRow{}) {
		panic("profiler: encodedRow does not match struct unwind_row")
	}
}

func unwindRows(opts Options) uint32 {
	n := opts.UnwindRows
	if n <= 0 {
		n = 1 << 20
	}
	return uint32(min(n, MaxUnwindRows))
}

func unwindProcesses(opts Options) uint32 {
	if opts.UnwindProcesses <= 0 {
		return 1024
	}
	return uint32(opts.UnwindProcesses)
}

// UnwindRowCapacity is how many rows the row store holds.
func (s *Sampler) UnwindRowCapacity() uint32 { return s.rows }

// WriteUnwindRows encodes rows, whose PCs are relative to base, into the
// row store from index first on. The caller owns the store's layout and
// must not point a process at rows it is rewriting.
func (s *Sampler) WriteUnwindRows(first uint32, rows []cfi.Row, base uint64) error {
	if uint64(first)+uint64(len(rows)) > uint64(s.rows) {
		return fmt.Errorf("writing %d unwind rows at %d: the store holds %d", len(rows), first, s.rows)
	}
	keys := make([]uint32, 0, min(len(rows), rowBatch))
	vals := make([]profilerUnwindRow, 0, min(len(rows), rowBatch))
	for len(rows) > 0 {
		n := min(len(rows), rowBatch)
		keys, vals = keys[:0], vals[:0]
		for i, r := range rows[:n] {
			e := encodeRow(r, base)
			keys = append(keys, first+uint32(i))
			vals = append(vals, profilerUnwindRow{Pc: e.PC, CfaOff: e.CFAOff, Rules: e.Rules, RbpOff: e.RBPOff})
		}
		if _, err := s.objs.UnwindRows.BatchUpdate(keys, vals, nil); err != nil {
			return fmt.Errorf("writing %d unwind rows at %d: %w", n, first, err)
		}
		rows, first = rows[n:], first+uint32(n)
	}
	return nil
}

// SetUnwindMappings replaces the executable mappings of process pid, which
// must be sorted by Start and not overlap. Only the first
// MaxUnwindMappings are kept.
func (s *Sampler) SetUnwindMappings(pid uint32, maps []UnwindMapping) error {
	var p profilerUnwindProc
	n := min(len(maps), MaxUnwindMappings)
	p.Count = uint32(n)
	for i, m := range maps[:n] {
		p.Mappings[i] = profilerUnwindMapping{
			Start: m.Start, End: m.End, TableBase: m.TableBase,
			RowFirst: m.RowFirst, RowCount: m.RowCount, Kind: uint32(m.Kind),
		}
	}
	if err := s.objs.UnwindProcs.Update(pid, &p, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("setting unwind mappings of pid %d: %w", pid, err)
	}
	return nil
}

// DeleteUnwindMappings forgets process pid: its samples fall back to frame
// pointers. Forgetting an unknown process is not an error.
func (s *Sampler) DeleteUnwindMappings(pid uint32) error {
	if err := s.objs.UnwindProcs.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("deleting unwind mappings of pid %d: %w", pid, err)
	}
	return nil
}
