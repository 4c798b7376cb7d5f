//go:build linux && (amd64 || arm64)

package profiler

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/ktime"
	"github.com/bpfcol/bpfcol/internal/process"
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

// The constants of unwind.go, which builds everywhere, must stay the
// generated ones: a difference fails the build (an array of another
// length, or a negative one).
var (
	_ [0]struct{} = [MaxUnwindMappings - len(profilerUnwindProc{}.Mappings)]struct{}{}
	_ [0]struct{} = [MappingFile - MappingKind(profilerUnwindMappingKindUNWIND_MAPPING_FILE)]struct{}{}
	_ [0]struct{} = [MappingAnon - MappingKind(profilerUnwindMappingKindUNWIND_MAPPING_ANON)]struct{}{}
	_ [0]struct{} = [MappingVDSO - MappingKind(profilerUnwindMappingKindUNWIND_MAPPING_VDSO)]struct{}{}
	_ [0]struct{} = [FilePending - FileState(profilerUnwindFileStateUNWIND_FILE_PENDING)]struct{}{}
	_ [0]struct{} = [FileCFI - FileState(profilerUnwindFileStateUNWIND_FILE_CFI)]struct{}{}
	_ [0]struct{} = [FileFramePointers - FileState(profilerUnwindFileStateUNWIND_FILE_FP)]struct{}{}
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
		return 2048
	}
	return uint32(opts.UnwindProcesses)
}

// UnwindRowCapacity is how many rows the row store holds for files'
// tables: [0, UnwindRowCapacity). The vDSO's rows come after them.
func (s *Sampler) UnwindRowCapacity() uint32 { return s.rows }

// SetUnwindVDSO writes the table of the kernel's vDSO, whose rows' PCs
// are offsets in the image relative to base, past the files' rows, and
// points the file VDSOFile at it: every process's MappingVDSO is walked
// with it. rows fit in MaxVDSORows.
func (s *Sampler) SetUnwindVDSO(rows []cfi.Row, base uint64) error {
	if len(rows) == 0 || len(rows) > MaxVDSORows {
		return fmt.Errorf("setting the vDSO's unwind table: %d rows, want 1 to %d", len(rows), MaxVDSORows)
	}
	table, err := s.writeRows(s.rows, rows, base, s.rows+MaxVDSORows)
	if err != nil {
		return fmt.Errorf("setting the vDSO's unwind table: %w", err)
	}
	return s.SetUnwindFile(VDSOFile, UnwindFile{State: FileCFI, RowBase: base, RowFirst: s.rows, RowCount: uint32(len(rows)), Index: table.Index})
}

// WriteUnwindRows encodes rows, whose PCs are relative to base, into the
// row store from index first on, and their index after them: the slots
// LayOutUnwindTable(rows, base) says. The caller owns the store's layout
// and must not point a process at rows it is rewriting.
//
// The rows go through a shared mapping of the store's pages, held only
// for the write: a batch update costs the kernel a copy and an update per
// 8-byte row, which made loading the tables of a few processes take
// 100 ms of CPU.
func (s *Sampler) WriteUnwindRows(first uint32, rows []cfi.Row, base uint64) error {
	_, err := s.writeRows(first, rows, base, s.rows)
	return err
}

// writeRows is WriteUnwindRows for slots below limit.
func (s *Sampler) writeRows(first uint32, rows []cfi.Row, base uint64, limit uint32) (table UnwindTable, err error) {
	table = LayOutUnwindTable(rows, base)
	if uint64(first)+uint64(table.Slots) > uint64(limit) {
		return table, fmt.Errorf("writing %d unwind rows and their index (%d slots) at %d: the store holds %d",
			len(rows), table.Slots, first, limit)
	}
	if len(rows) == 0 {
		return table, nil
	}
	page := int64(os.Getpagesize())
	from := int64(first) * UnwindRowBytes
	off := from &^ (page - 1)
	end := (from + int64(table.Slots)*UnwindRowBytes + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(s.objs.UnwindRows.FD(), off, int(end-off), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return table, fmt.Errorf("mapping unwind rows %d-%d: %w", first, uint64(first)+uint64(table.Slots), err)
	}
	defer func() {
		if uerr := unix.Munmap(mem); uerr != nil && err == nil {
			err = fmt.Errorf("unmapping unwind rows: %w", uerr)
		}
	}()
	dst := unsafe.Slice((*profilerUnwindRow)(unsafe.Pointer(&mem[from-off])), table.Slots)
	for i, r := range rows {
		e := encodeRow(r, base)
		dst[i] = profilerUnwindRow{Pc: e.PC, CfaOff: e.CFAOff, Rules: e.Rules, FpOff: e.FPOff}
	}
	index := dst[len(rows):]
	entries := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(index))), 2*len(index))
	clear(entries)
	fillIndex(entries, rows, base, table.Index)
	return table, nil
}

// SetUnwindFile makes the sampler walk frames in the file key with t: its
// rows, or frame pointers. Every process mapping the file walks it so
// from its next frame there. Rows must be in place before t points at
// them.
func (s *Sampler) SetUnwindFile(key process.FileKey, t UnwindFile) error {
	v := profilerUnwindFile{State: uint32(t.State), RowBase: t.RowBase, RowFirst: t.RowFirst, RowCount: t.RowCount,
		IndexShift: t.Index.Shift, IndexGranules: t.Index.Granules}
	if err := s.objs.UnwindFiles.Update(fileKey(key), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("setting the unwind table of file %d:%d: %w", key.Dev, key.Ino, err)
	}
	return nil
}

// DeleteUnwindFile forgets the file key: the next walk that enters it asks
// for its table again (a FileNotice). Forgetting an unknown file is not
// an error.
func (s *Sampler) DeleteUnwindFile(key process.FileKey) error {
	if err := s.objs.UnwindFiles.Delete(fileKey(key)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("deleting the unwind table of file %d:%d: %w", key.Dev, key.Ino, err)
	}
	return nil
}

// UnwindFileUse returns, for every file the sampler knows, when a walk
// last read its table: the eviction order. Times are in units of about a
// second (2^30 ns) of CLOCK_MONOTONIC, modulo 2^32. The loader asks every
// sweep: the map is read in batches, a few syscalls for all of it, rather
// than two per file.
func (s *Sampler) UnwindFileUse() (map[process.FileKey]uint32, error) {
	out := map[process.FileKey]uint32{}
	if err := s.unwindFileUseBatched(out); err == nil {
		return out, nil
	}
	// Kernels without batch operations on hash maps (before 5.6), or a
	// bucket larger than a batch (ENOSPC): one file at a time.
	clear(out)
	var k profilerUnwindFileKey
	var v profilerUnwindFile
	it := s.objs.UnwindFiles.Iterate()
	for it.Next(&k, &v) {
		out[process.KernelFileKey(k.Dev, k.Ino)] = v.Used
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading unwind file use: %w", err)
	}
	return out, nil
}

// unwindFileUseBatch is how many files one batch lookup returns at most.
const unwindFileUseBatch = 512

func (s *Sampler) unwindFileUseBatched(out map[process.FileKey]uint32) error {
	keys := make([]profilerUnwindFileKey, unwindFileUseBatch)
	vals := make([]profilerUnwindFile, unwindFileUseBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := s.objs.UnwindFiles.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			out[process.KernelFileKey(keys[i].Dev, keys[i].Ino)] = vals[i].Used
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil // the end, reached with this batch
		case err != nil:
			return err
		}
	}
}

// LookupUnwindFile returns what the sampler holds for the file key.
func (s *Sampler) LookupUnwindFile(key process.FileKey) (UnwindFile, bool, error) {
	var v profilerUnwindFile
	if err := s.objs.UnwindFiles.Lookup(fileKey(key), &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return UnwindFile{}, false, nil
		}
		return UnwindFile{}, false, fmt.Errorf("looking up the unwind table of file %d:%d: %w", key.Dev, key.Ino, err)
	}
	return UnwindFile{State: FileState(v.State), RowBase: v.RowBase, RowFirst: v.RowFirst, RowCount: v.RowCount,
		Index: UnwindIndex{Shift: v.IndexShift, Granules: v.IndexGranules}}, true, nil
}

// fileKeyOf is the FileKey of the file BPF names by s_dev and inode;
// zero when it named none.
func fileKeyOf(dev uint32, ino uint64) process.FileKey {
	if ino == 0 {
		return process.FileKey{}
	}
	return process.KernelFileKey(dev, ino)
}

func fileKey(key process.FileKey) *profilerUnwindFileKey {
	return &profilerUnwindFileKey{Ino: key.Ino, Dev: key.KernelDev()}
}

// SetUnwindMappings replaces the executable mappings of process pid, read
// by user space from img, the image a NoticeRead named (kernels where BPF
// does not read them). maps must be sorted by Start and not overlap; only
// the first MaxUnwindMappings are kept. It reports whether the sampler held
// no mappings of pid before.
func (s *Sampler) SetUnwindMappings(pid uint32, img Image, maps []UnwindMapping) (bool, error) {
	var p profilerUnwindProc
	n := min(len(maps), MaxUnwindMappings)
	p.Mm, p.StartNs, p.ComposedNs = img.MM, img.StartNs, uint64(ktime.MonotonicNanos())
	p.Count = uint32(n)
	p.Flags = uint32(img.Reads) << 24
	if len(maps) > n {
		p.Flags |= uint32(profilerUnwindProcFlagUNWIND_PROC_OVERFLOW)
	}
	for i, m := range maps[:n] {
		p.Mappings[i] = profilerUnwindMapping{
			Start: m.Start, End: m.End, FileBase: m.FileBase,
			Ino: m.File.Ino, Dev: m.File.KernelDev(), Kind: uint16(m.Kind), Prot: m.Prot,
		}
	}
	err := s.objs.UnwindProcs.Update(pid, &p, ebpf.UpdateNoExist)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, ebpf.ErrKeyExist) {
		err = s.objs.UnwindProcs.Update(pid, &p, ebpf.UpdateAny)
	}
	if err != nil {
		return false, fmt.Errorf("setting unwind mappings of pid %d: %w", pid, err)
	}
	return false, nil
}

// UnwindMappings returns the executable mappings the sampler holds for
// process pid, and the image they were read from.
func (s *Sampler) UnwindMappings(pid uint32) ([]UnwindMapping, Image, bool, error) {
	var p profilerUnwindProc
	if err := s.objs.UnwindProcs.Lookup(pid, &p); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, Image{}, false, nil
		}
		return nil, Image{}, false, fmt.Errorf("looking up unwind mappings of pid %d: %w", pid, err)
	}
	return appendMappings(nil, &p), Image{MM: p.Mm, StartNs: p.StartNs, Reads: uint8(p.Flags >> 24)}, true, nil
}

// appendMappings appends p's mappings to dst.
func appendMappings(dst []UnwindMapping, p *profilerUnwindProc) []UnwindMapping {
	for _, m := range p.Mappings[:min(int(p.Count), len(p.Mappings))] {
		um := UnwindMapping{Start: m.Start, End: m.End, FileBase: m.FileBase, Kind: MappingKind(m.Kind), Prot: m.Prot}
		if um.Kind == MappingFile {
			um.File = fileKeyOf(m.Dev, m.Ino)
		}
		dst = append(dst, um)
	}
	return dst
}

// DeleteUnwindMappings forgets process pid: its next sample has its
// mappings read again. Forgetting an unknown process is not an error.
func (s *Sampler) DeleteUnwindMappings(pid uint32) error {
	if err := s.objs.UnwindProcs.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("deleting unwind mappings of pid %d: %w", pid, err)
	}
	return nil
}
