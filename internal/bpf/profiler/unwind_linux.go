//go:build linux && amd64

package profiler

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// The Go mirror of struct unwind_row must stay the generated one: a size
// apart fails the build (a wrong array length, or a negative one).
var (
	_ [0]struct{} = [unsafe.Sizeof(encodedRow{}) - unsafe.Sizeof(profilerUnwindRow{})]struct{}{}
	_ [0]struct{} = [unsafe.Sizeof(profilerUnwindRow{}) - unsafe.Sizeof(encodedRow{})]struct{}{}
	_ [0]struct{} = [UnwindRowBytes - unsafe.Sizeof(encodedRow{})]struct{}{}
	_ [0]struct{} = [unsafe.Sizeof(encodedRow{}) - UnwindRowBytes]struct{}{}
)

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

// UnwindRowCapacity is how many rows the row store holds for files'
// tables: [0, UnwindRowCapacity). The vDSO's rows come after them.
func (s *Sampler) UnwindRowCapacity() uint32 { return s.rows }

// SetUnwindVDSO writes the table of the kernel's vDSO, whose rows' PCs
// are relative to base, an address in the image (its first byte at 0),
// and points the walk at it for every process: a PC within size bytes of
// the image's start in a process is looked up there. rows fit in
// MaxVDSORows.
func (s *Sampler) SetUnwindVDSO(rows []cfi.Row, base, size uint64) error {
	if len(rows) == 0 || len(rows) > MaxVDSORows {
		return fmt.Errorf("setting the vDSO's unwind table: %d rows, want 1 to %d", len(rows), MaxVDSORows)
	}
	if err := s.writeRows(s.rows, rows, base, s.rows+MaxVDSORows); err != nil {
		return fmt.Errorf("setting the vDSO's unwind table: %w", err)
	}
	m := profilerUnwindMapping{Start: 0, End: size, TableBase: base, RowFirst: s.rows, RowCount: uint32(len(rows)),
		Kind: uint32(MappingCFI)}
	if err := s.objs.UnwindVdso.Update(uint32(0), &m, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("setting the vDSO's unwind table: %w", err)
	}
	return nil
}

// WriteUnwindRows encodes rows, whose PCs are relative to base, into the
// row store from index first on. The caller owns the store's layout and
// must not point a process at rows it is rewriting.
//
// The rows go through a shared mapping of the store's pages, held only
// for the write: a batch update costs the kernel a copy and an update per
// 8-byte row, which made loading the tables of a few processes take
// 100 ms of CPU.
func (s *Sampler) WriteUnwindRows(first uint32, rows []cfi.Row, base uint64) error {
	return s.writeRows(first, rows, base, s.rows)
}

// writeRows is WriteUnwindRows for rows below limit.
func (s *Sampler) writeRows(first uint32, rows []cfi.Row, base uint64, limit uint32) (err error) {
	if uint64(first)+uint64(len(rows)) > uint64(limit) {
		return fmt.Errorf("writing %d unwind rows at %d: the store holds %d", len(rows), first, limit)
	}
	if len(rows) == 0 {
		return nil
	}
	page := int64(os.Getpagesize())
	from := int64(first) * UnwindRowBytes
	off := from &^ (page - 1)
	end := (from + int64(len(rows))*UnwindRowBytes + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(s.objs.UnwindRows.FD(), off, int(end-off), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping unwind rows %d-%d: %w", first, uint64(first)+uint64(len(rows)), err)
	}
	defer func() {
		if uerr := unix.Munmap(mem); uerr != nil && err == nil {
			err = fmt.Errorf("unmapping unwind rows: %w", uerr)
		}
	}()
	dst := unsafe.Slice((*profilerUnwindRow)(unsafe.Pointer(&mem[from-off])), len(rows))
	for i, r := range rows {
		e := encodeRow(r, base)
		dst[i] = profilerUnwindRow{Pc: e.PC, CfaOff: e.CFAOff, Rules: e.Rules, RbpOff: e.RBPOff}
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
